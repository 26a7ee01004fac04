// From per-step records to the figures of a run: medians and spread over the
// steps after the warm-up (the first steps pay for allocation and caches), so
// one slow step neither hides nor fakes a speed-up.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace hetpar {

// The value at quantile q in [0, 1] of `values` (linear interpolation);
// NaN when empty.
double quantile(std::vector<double> values, double q);

// Summary of steps.jsonl records (fields step_seconds, tflops_per_gpu, mfu,
// tokens_per_second, image_tokens_per_second, samples_per_second, flops,
// peak_memory_mib, phases{...}): medians (and p10/p90 of the step time)
// over the steps after `warmup_steps`, or over all steps when the run is
// shorter than that (timed_steps says which).
nlohmann::json summarize_steps(const std::vector<nlohmann::json>& steps, int64_t warmup_steps);

// A run that diverged writes its last step with "diverged": true and the
// loss as null (JSON has no NaN). The first such step, if any.
bool is_diverged(const nlohmann::json& step);
std::optional<int64_t> diverged_step(const std::vector<nlohmann::json>& steps);

// Step-by-step loss parity of two runs' steps (b is the reference), over the
// steps both ran with a finite loss; with `key` = "eval_loss", over the steps
// both evaluated (run.eval_every).
struct LossCurveDifference {
  int64_t compared = 0;  // steps present in both
  double max_abs = 0, max_rel = 0;
  int64_t worst_step = 0;
};
LossCurveDifference loss_curve_difference(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                                          const char* key = "loss");

// The records of a run's steps.jsonl (a run directory or the file itself):
// each has a step and a numeric loss, or is a diverged step. A last line
// without its newline that does not parse is a record torn by a killed
// writer and is left out. Throws std::runtime_error naming the file (and
// line) when it cannot.
std::vector<nlohmann::json> read_steps(const std::string& run);

// The records of steps 1 to `last_step` of the run in `run_dir`, which a
// resume from its checkpoint of that step keeps (a step's record is written
// before its checkpoint, so every one is there). Throws std::runtime_error
// naming the file when any is missing, repeated or out of order.
std::vector<nlohmann::json> steps_through(const std::string& run_dir, int64_t last_step);

}  // namespace hetpar
