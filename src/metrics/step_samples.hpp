// The timed per-step values of a sweep's runs, read back from each run's
// steps.jsonl: what the regression check tests for significance, where a
// run's record holds only medians.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hetpar {

// One metric's values, one list per run, or why they could not be read.
struct StepSamples {
  std::vector<std::vector<double>> runs;
  std::string problem;  // "" when every run's values were read
  size_t count() const;  // values over all runs
};

// For each record (a results.jsonl object of a finished run), the values of
// `field` (e.g. "tokens_per_second") in `results_dir`/<run_dir>/steps.jsonl,
// leaving out the record's first `warmup_steps` steps as its summary did.
// Every timed step must carry a positive number there, and their count must
// be the record's `timed_steps`: a run directory that does not hold the
// steps the record summarised is a problem, not a sample. An empty
// `results_dir` means the records came without their runs.
StepSamples read_step_samples(const std::vector<const nlohmann::json*>& records, const std::string& results_dir,
                              const char* field);

}  // namespace hetpar
