// `hetpar train RUN.toml`: trains one run on every rank of its layout.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/job_command.hpp"
#include "train/train_job.hpp"

namespace hetpar {

struct TrainArgs {
  JobArgs job;
  TrainOutputs outputs;
};

CLI::App* add_train_command(CLI::App& app, TrainArgs& args);
int run_train(const TrainArgs& args);

}  // namespace hetpar
