// Whether a step-time model orders runs as the measurement does. Runs
// measured closer than a margin are a coin toss on a noisy machine; only
// pairs measured further apart must keep their order in the prediction.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hetpar {

struct TimedRun {
  std::string id;
  double measured = 0, predicted = 0;  // step seconds
};

// Pairs (in input order) measured more than `margin` apart, relative to the
// faster, whose predictions put them the other way round.
std::vector<std::pair<std::string, std::string>> misordered_pairs(const std::vector<TimedRun>& runs, double margin);

}  // namespace hetpar
