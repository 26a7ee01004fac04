// `hetpar eval`: the loss of one batch, or of a directory of them, given in transformers' conventions,
// for a model loaded from a transformers LLaVA directory.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

// Prints "eval loss: <value>" on rank 0: the mean over the target tokens of
// the batch file `batch` (data/file_batch.hpp), run as one step of the
// layout's schedule forward only (any placement, TP, CP, PP, DP), with the
// micro-batches config.data sets (hetpar eval makes the step the file's
// batch); or of every full step of data.global_batch_size samples of a
// directory of batch files (data/file_dataset.hpp), in the files' order.
int run_eval_job(const RunConfig& config, const LaunchEnv& env, const std::string& init_hf, const std::string& batch);

}  // namespace hetpar
