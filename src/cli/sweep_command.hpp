// `hetpar sweep FILE [--dry-run] [--out DIR] [--set k=v]... [--repeat K]`:
// expands a sweep file's grid, validates every point (invalid ones listed
// with their reason), and runs each valid point and its baseline K times in
// fresh processes; resumable.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace hetpar {

struct SweepArgs {
  std::string file;
  std::string out_dir;                 // default: results/sweeps/<sweep name>
  std::vector<std::string> overrides;  // applied to every run, last
  std::string launch;                  // launch prefix with {ranks}; empty: local launcher
  bool dry_run = false;
  bool fresh = false;
  bool retry_failed = false;
  bool no_plots = false;
  double run_timeout_s = 3600;
  int repeat = 1;  // times each run is measured (repeat_runs)
  std::string profile;  // hetpar calibrate's profile: predict each run's step time
};

CLI::App* add_sweep_command(CLI::App& app, SweepArgs& args);
int run_sweep_command(const SweepArgs& args);

}  // namespace hetpar
