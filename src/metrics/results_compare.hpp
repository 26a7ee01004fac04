// The regression check between two sweeps' results: points matched by label,
// judged on TFLOPS/GPU and tokens/s per timed step, so that a change is called
// a regression only when it is both larger than a threshold and larger than
// the noise of the measurements.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/significance.hpp"

namespace hetpar {

// One sweep's results: its records and the directory their `run_dir`s are
// relative to (empty: the runs' steps are not read).
struct ResultSet {
  std::vector<nlohmann::json> records;
  std::string dir;
};

// results.jsonl (the file, or the directory holding it) and its directory.
// Throws std::runtime_error like read_results.
ResultSet read_result_set(const std::string& path_or_dir);

struct ResultsComparison {
  std::string text;      // the table and notes, ready to print
  int regressions = 0;   // points judged REGRESSED
  int matched = 0;       // labels ok in OLD and present in NEW
  std::vector<std::string> only_old, only_new;  // "ok" labels present on one side only
};

// Fewer timed steps than this on a side: the point is judged on its medians
// alone (a bootstrap of two or three values says nothing).
inline constexpr size_t kMinStepsForSignificance = 5;

// Points are matched by `label`; the runs of a label with different run ids
// are repeats of the point (hetpar sweep --repeat) and are pooled. Each point
// whose runs were all "ok" in OLD is judged:
// - REGRESSED when NEW has a run of it in another status (failed, diverged,
//   invalid) or without figures;
// - per metric (TFLOPS/GPU, tokens/s), from the timed steps of every run of
//   both sides: the ratio of the medians NEW/OLD with its bootstrap interval
//   (`bootstrap`), and a Mann–Whitney p-value for information. REGRESSED when
//   the metric fell by more than `threshold` (a fraction: 0.05 = 5%) AND its
//   interval lies wholly below 1: the drop is beyond the threshold and beyond
//   the noise. Improved likewise, upwards;
// - when a side's steps cannot be read (or are fewer than
//   kMinStepsForSignificance), on the records' medians (the median of the
//   repeats' medians) against the threshold alone, marked "no per-step
//   samples: not tested for significance".
// Points not ok in OLD are counted in the text, not judged.
ResultsComparison compare_results(const ResultSet& old_set, const ResultSet& new_set, double threshold,
                                  const BootstrapOptions& bootstrap = {});

// "5%" -> 0.05, "12.5%" -> 0.125, "0.05" -> 0.05. A bare number must be a
// fraction in [0, 1), so "5" is refused rather than read as 500%.
// Throws std::invalid_argument naming the value.
double parse_threshold(const std::string& text);

}  // namespace hetpar
