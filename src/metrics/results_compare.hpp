// The regression check between two sweeps' results: matched by label, judged on
// TFLOPS/GPU and tokens/s against a relative threshold.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hetpar {

struct ResultsComparison {
  std::string text;      // the table and notes, ready to print
  int regressions = 0;   // rows where a metric fell by more than the threshold
  int matched = 0;       // labels ok in OLD and present in NEW
  std::vector<std::string> only_old, only_new;  // "ok" labels present on one side only
};

// Records are matched across the sets by `label` (the last record of a label
// wins). Each point "ok" in OLD is judged: a regression when NEW has it in
// another status (failed, diverged, invalid), without figures, or with
// TFLOPS/GPU or tokens/s down by more than `threshold` (a fraction: 0.05 =
// 5%). Points not ok in OLD are counted in the text, not judged.
ResultsComparison compare_results(const std::vector<nlohmann::json>& old_records,
                                  const std::vector<nlohmann::json>& new_records, double threshold);

// "5%" -> 0.05, "12.5%" -> 0.125, "0.05" -> 0.05. A bare number must be a
// fraction in [0, 1), so "5" is refused rather than read as 500%.
// Throws std::invalid_argument naming the value.
double parse_threshold(const std::string& text);

}  // namespace hetpar
