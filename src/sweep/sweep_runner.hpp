// Runs a sweep: every valid run in fresh processes (`hetpar train` on the
// ranks it needs), one line of results.jsonl per finished run, appended as
// soon as it ends so an interrupted sweep resumes where it stopped; failures
// (a crash, a timeout, out of memory) are recorded and the sweep goes on.
// Each point is compared with its baseline: speed-ups and loss parity.
#pragma once

#include <string>
#include <vector>

#include "plan/profile.hpp"
#include "sweep/sweep_spec.hpp"

namespace hetpar {

struct SweepOptions {
  std::string out_dir;
  std::string hetpar_binary;    // this executable
  std::string python;           // draws the plots; empty: no plots
  std::string plot_script;
  // How a run's ranks start: empty = hetpar's local launcher (--nproc);
  // else a command prefix with {ranks}, e.g. "srun -n {ranks}" or
  // "torchrun --nproc-per-node {ranks} --no-python", run through sh.
  std::string launch;
  bool fresh = false;           // empty out_dir (a sweep directory hetpar made) and start over
  bool retry_failed = false;    // run again the runs whose earlier outcome was not "ok"
  double run_timeout_s = 3600;  // wall-clock limit of one run
  const Profile* profile = nullptr;  // given: each run's predicted step time beside the measured one
};

// Returns 0 when every valid run succeeded and every point held the loss
// tolerance, 1 otherwise (results are written either way). Throws
// SweepDirError when out_dir cannot be used, FileError when a result cannot
// be written, std::runtime_error when out_dir holds another sweep's results.
int run_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SweepOptions& options);

}  // namespace hetpar
