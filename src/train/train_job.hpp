// What every rank of a `hetpar train` job runs once it knows who it is.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

// Returns the process exit code. Until the model lands, a step is a check of
// every process group of both modules (see comm_check.hpp), timed and logged
// like a training step.
int run_train_job(const RunConfig& config, const LaunchEnv& env, const std::string& out_dir);

}  // namespace hetpar
