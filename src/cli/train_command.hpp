// `hetpar train RUN.toml`: validates the run, launches its ranks (or joins a
// job started by torchrun/srun) and runs it on every rank.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace hetpar {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set key=value
  int nproc = 0;                       // 0: as many as the layout needs
  std::string out;                     // default: results/runs/<run.name>
};

CLI::App* add_train_command(CLI::App& app, TrainArgs& args);
int run_train(const TrainArgs& args);

}  // namespace hetpar
