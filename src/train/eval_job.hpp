// `hetpar eval`: the loss of one batch given in transformers' conventions,
// for a model loaded from a transformers LLaVA directory.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "data/synthetic_data.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

// A batch file holds input_ids [B, S] and labels [B, S] (int64; -100 =
// ignored; unshifted: label i is the token at position i) and pixel_values
// [K, C, H, W] (float32) for the K placeholder runs, in order.
MicroBatch read_hf_batch(const std::string& path, const RunConfig& config);

// The sequence length of the batch file's input_ids [batch, sequence].
int64_t batch_sequence_length(const std::string& path);

// Prints "eval loss: <value>" on rank 0: the mean over target tokens.
int run_eval_job(const RunConfig& config, const LaunchEnv& env, const std::string& init_hf, const std::string& batch);

}  // namespace hetpar
