#include "config/device_choice.hpp"

#include "config/config_error.hpp"

namespace hetpar {

void resolve_device(RunConfig& c, int visible) {
  std::string& device = c.runtime.device;
  if (device == "auto") device = visible > 0 ? "cuda" : "cpu";
  if (device == "cuda" && visible <= 0) {
    throw ConfigError(c.source_file, "runtime.device",
                      "\"cuda\" needs a CUDA device, and none is visible (no driver, or CUDA_VISIBLE_DEVICES "
                      "hides them); use \"cpu\" or \"auto\"");
  }
  const bool cuda = device == "cuda";
  std::string& backend = c.runtime.backend;
  if (backend == "auto") backend = cuda ? "nccl" : "gloo";
  if (backend == "nccl" && !cuda) {
    throw ConfigError(c.source_file, "runtime.backend",
                      "\"nccl\" moves CUDA tensors, but runtime.device is \"cpu\"; use \"gloo\" or \"auto\"");
  }
  if (backend == "gloo" && cuda) {
    throw ConfigError(c.source_file, "runtime.backend",
                      "\"gloo\" cannot send CUDA tensors point-to-point, which the schedules need; use \"nccl\" or "
                      "\"auto\" with runtime.device = \"cuda\"");
  }
  std::string& precision = c.run.precision;
  if (precision == "auto") precision = cuda ? "bf16" : "fp32";
}

int cuda_device_index(int local_rank, int local_ranks, int visible) {
  if (local_ranks > visible || local_rank >= visible) {
    throw ConfigError("launch", "runtime.device",
                      "one rank per GPU: this node runs " + std::to_string(std::max(local_ranks, local_rank + 1)) +
                          " ranks but has " + std::to_string(visible) +
                          " visible CUDA device(s); start fewer ranks per node or use runtime.device = \"cpu\"");
  }
  return local_rank;
}

}  // namespace hetpar
