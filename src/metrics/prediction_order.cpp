#include "metrics/prediction_order.hpp"

#include <algorithm>
#include <cmath>

namespace hetpar {

std::vector<std::pair<std::string, std::string>> misordered_pairs(const std::vector<TimedRun>& runs, double margin) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    for (size_t j = i + 1; j < runs.size(); ++j) {
      const TimedRun &a = runs[i], &b = runs[j];
      if (std::abs(a.measured - b.measured) <= margin * std::min(a.measured, b.measured)) continue;
      if ((a.measured < b.measured) != (a.predicted < b.predicted)) out.emplace_back(a.id, b.id);
    }
  }
  return out;
}

}  // namespace hetpar
