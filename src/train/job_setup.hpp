// Pieces every rank job (train, eval) sets up the same way.
#pragma once

#include <chrono>

#include "config/run_config.hpp"
#include "dist/runtime.hpp"

namespace hetpar {

inline RuntimeOptions runtime_options(const RuntimeConfig& c, const at::Device& device) {
  RuntimeOptions options;
  options.backend = c.backend;
  options.device = device;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000));
  options.intra_op_threads = static_cast<int>(c.intra_op_threads);
  options.nccl_split = c.nccl_split;
  return options;
}

}  // namespace hetpar
