// The verdict of a sweep, as markdown (report.md, also printed): every run's
// TFLOPS/GPU and tokens/s beside its baseline's, the loss-parity column, and
// the placements side by side for each setting of the other axes — the
// ratios the paper's claims are about.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "sweep/sweep_spec.hpp"

namespace hetpar {

struct SweepVerdict {
  std::string text;
  bool all_ok = false;  // no failed run, and every point within the loss tolerance
};

// `results_dir` holds the runs' directories (their steps give the speed-ups'
// intervals: sweep/speedup_noise.hpp); "" leaves the intervals out.
SweepVerdict sweep_report(const std::vector<nlohmann::json>& records, const SweepSpec& spec,
                          const std::string& results_dir = "");
// sweep_report of the runs in the directory that holds `path`, also written to `path`.
SweepVerdict write_sweep_report(const std::vector<nlohmann::json>& records, const SweepSpec& spec,
                                const std::string& path);

}  // namespace hetpar
