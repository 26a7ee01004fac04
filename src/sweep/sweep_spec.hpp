// A sweep file: a base run plus axes, each axis an ordered list of named
// settings; the grid is their product. Every point also names a baseline
// (its settings with the sweep's `baseline` overrides on top: usually the
// uniform placement with the LLM's layout), and points that resolve to the
// same baseline share one run of it.
//
//   [sweep]
//   name = "cpu-default"
//   base = "../workloads/runs/sweep_base.toml"      # relative to this file
//   loss_rtol = 1e-5                                # per-point loss-parity tolerance
//   baseline = { layout = { placement = "uniform", encoder = { tp = 1, dp = 1 } } }
//
//   [[axis]]
//   name = "encoder"
//   [[axis.value]]
//   name = "enc-128x2"
//   set = { encoder = { hidden = 128, layers = 2 } }
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace hetpar {

struct SweepAxisValue {
  std::string name;
  std::vector<std::string> overrides;  // "dotted.key=value" (TOML values)
};

struct SweepAxis {
  std::string name;
  std::vector<SweepAxisValue> values;
};

struct SweepSpec {
  std::string file, name, base;       // base: path of the base run file
  double loss_rtol = 1e-5;
  std::vector<std::string> baseline;  // overrides that turn a point into its baseline
  std::vector<SweepAxis> axes;
};

// Throws ConfigError (file, key, reason) on a malformed sweep file: a
// missing or unknown key, two axes of one name, two values of one axis with
// one name, two points with one label.
SweepSpec load_sweep_spec(const std::string& file);

// One run of the sweep: a grid point or a baseline.
struct SweepRun {
  std::string id;      // "p003" for points, "b001" for baselines
  std::string label;   // value names joined: stable across machines and commits
  bool is_baseline = false;
  std::vector<std::pair<std::string, std::string>> axes;  // axis name -> value name
  std::vector<std::string> overrides;                     // on top of the base run file
  std::optional<RunConfig> config;                        // empty when invalid
  std::string invalid_reason;
  std::string baseline_id;                                // points only; empty when its baseline is invalid
  int world_size = 0;                                     // ranks the run needs
  std::string config_hash;                                // of the resolved config: resume key
  int repeat = 1;                                         // which measurement of the run (sweep --repeat)
};

// The grid in order (first axis slowest), each point preceded by its baseline
// the first time that baseline is needed. `extra` overrides apply to every run
// last (the command line's --set). Invalid points are kept with their reason.
std::vector<SweepRun> expand_sweep(const SweepSpec& spec, const std::vector<std::string>& extra);

// The runs measured `repeats` times, in rounds: round 1 is `runs` as they
// are; each later round k runs every valid run again as "<id>r<k>" (p001r2,
// b001r2), a point against its baseline's repeat of the same round. Rounds
// rather than K runs in a row, so that a slow spell of the machine falls on
// every point alike instead of on one. The repeats of a run keep its label
// (what `compare --results` pools them by) and its config hash (they differ
// only in their name), so raising --repeat on a finished sweep only adds the
// new rounds. Invalid runs are listed once. Throws std::invalid_argument
// when `repeats` < 1.
std::vector<SweepRun> repeat_runs(const std::vector<SweepRun>& runs, int repeats);

// Ranks a validated run needs: the larger end of the two modules' rank ranges.
int world_size_of(const RunConfig& config);

}  // namespace hetpar
