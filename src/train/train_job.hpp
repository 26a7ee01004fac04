// What every rank of a `hetpar train` job runs once it knows who it is.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

// Trains the model for run.steps optimizer steps; returns the exit code.
// Rank 0 writes OUT/config.toml, OUT/steps.jsonl and OUT/summary.json.
struct TrainOutputs {
  std::string out_dir;   // config.toml, steps.jsonl, summary.json
  std::string init_hf;   // start from this transformers LLaVA directory ("" = fresh init)
  std::string save_hf;   // write the final model here as a transformers LLaVA directory
  std::string resume;    // continue from the latest complete checkpoint of this run directory ("" = start)
};

int run_train_job(const RunConfig& config, const LaunchEnv& env, const TrainOutputs& outputs);

}  // namespace hetpar
