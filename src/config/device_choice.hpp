// Where a run computes, resolved once per process from the run file's
// runtime.device, run.precision and runtime.backend and what the machine has:
// "auto" becomes cuda (bf16, NCCL) where a GPU is visible, else cpu (fp32,
// Gloo). Torch-free: the caller counts the visible devices.
#pragma once

#include "config/run_config.hpp"

namespace hetpar {

// Resolves the three "auto" fields of `config` in place and checks that the
// rest agree with each other and with the machine: cuda without a visible
// device, NCCL on the CPU and Gloo on CUDA (its point-to-point calls need
// host tensors) are refused. Throws ConfigError naming the key.
void resolve_device(RunConfig& config, int visible_cuda_devices);

// The CUDA device index of a rank: its local rank on its node (one rank per
// GPU). Throws ConfigError when the node runs more ranks than it has devices.
int cuda_device_index(int local_rank, int local_ranks, int visible_cuda_devices);

}  // namespace hetpar
