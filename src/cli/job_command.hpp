// What `train` and `eval` share: a run file with overrides, validated before
// anything starts, then either spawned as local ranks or joined as one rank of
// a job that torchrun/srun started.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

struct JobArgs {
  std::string config;                  // empty: the model from hf_model_dir, defaults for the rest
  std::vector<std::string> overrides;  // --set key=value
  std::string hf_model_dir;            // --init-hf: its config.json is the model; a run file may only agree
  int nproc = 0;                       // 0: as many as the layout needs
  bool oversubscribe = false;          // start more local ranks than 4 per core
  std::string settings_note;           // said after a config error: settings the subcommand made itself
};

// Adds CONFIG, --set and --nproc to a subcommand, and the run file's help.
// The path of this executable, which launchers and sweeps start again.
std::string self_executable();

void add_job_options(CLI::App& cmd, JobArgs& args, bool config_required = true);

// Loads and checks the config (exit 2 on error). Without a launch environment
// it checks that this machine can host the job's ranks and memory, runs
// `preflight` (which throws ConfigError for input it cannot use), then spawns
// the ranks, each re-running `subcommand` with `rank_args` appended; inside a
// rank of an outside launcher (torchrun, srun) rank 0 runs `preflight` and
// every rank `rank_main`. Returns the exit code.
using Preflight = std::function<void(const RunConfig&)>;
int run_job(const std::string& subcommand, const JobArgs& args, const std::vector<std::string>& rank_args,
            const std::function<int(const RunConfig&, const LaunchEnv&)>& rank_main, const Preflight& preflight);

}  // namespace hetpar
