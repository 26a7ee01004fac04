// A sweep's speed-ups with the machine's run-to-run noise: each point over
// its baseline, and each setting's placements over one another, as the
// ratio of the medians of every timed step's tokens/s with a bootstrap
// interval that resamples runs before steps (metrics/significance.hpp).
// On a shared machine one point's repeated runs differ by more than the
// steps inside one run do (docs/design.md, "Sweeps"), so an interval from
// one run a side would be too narrow to mean anything: it is given only
// with at least two runs a side (`hetpar sweep --repeat`).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hetpar {

struct SpeedupNoise {
  std::string comparison;  // "enc-128x2 / colocated over its baseline", "enc-128x2: non-colocated over colocated"
  double ratio = 0, low = 0, high = 0;  // tokens/s of the point over the reference's
  int point_runs = 0, reference_runs = 0;
  std::string problem;  // why there is no interval ("" when there is)
  // "faster" or "slower" when the interval lies wholly on one side of 1,
  // else "within noise"; "-" without an interval.
  std::string verdict() const;
};

// Every comparison the report makes, from all of a sweep's records (every
// run, repeats unpooled) and the directory their run_dirs are relative to.
std::vector<SpeedupNoise> sweep_speedup_noise(const std::vector<nlohmann::json>& records,
                                              const std::string& results_dir);

// The report's section: a table of the comparisons with an interval, or why none has one.
std::string speedup_noise_section(const std::vector<SpeedupNoise>& rows);

}  // namespace hetpar
