// `hetpar devices [--require-gpu]`: what this machine offers a run, as JSON
// on stdout: the visible CUDA devices, the driver, CUDA runtime, NCCL and
// torch versions, and which libnccl/libcudart this process really loaded.
// With --require-gpu and no device it says so and exits 3.
#pragma once

#include <CLI/CLI.hpp>

namespace hetpar {

struct DevicesArgs {
  bool require_gpu = false;
};

inline constexpr int kExitNoGpu = 3;

CLI::App* add_devices_command(CLI::App& app, DevicesArgs& args);
int run_devices(const DevicesArgs& args);

}  // namespace hetpar
