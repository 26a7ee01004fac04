#include "cli/devices_command.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "dist/device.hpp"
#include "util/build_info.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

// Shared libraries of CUDA and NCCL mapped into this process: the ones that
// run, whatever a header or the build said.
std::vector<std::string> loaded_gpu_libraries() {
  std::set<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string file = path.substr(path.rfind('/') + 1);
    for (const char* prefix : {"libnccl", "libcudart", "libcuda.", "libcublas.", "libtorch_cuda"}) {
      if (file.rfind(prefix, 0) == 0) found.insert(path);
    }
  }
  return {found.begin(), found.end()};
}

}  // namespace

CLI::App* add_devices_command(CLI::App& app, DevicesArgs& args) {
  CLI::App* cmd = app.add_subcommand("devices", "the CUDA devices, driver, CUDA, NCCL and torch this machine offers");
  cmd->add_flag("--require-gpu", args.require_gpu, "exit 3 when no CUDA device is visible");
  return cmd;
}

int run_devices(const DevicesArgs& args) {
  const int count = visible_cuda_devices();
  nlohmann::json out = {{"hetpar_version", build_version()}, {"commit", build_commit()},
                        {"torch_version", build_torch_version()}, {"cuda_devices", count},
                        {"devices", nlohmann::json::array()}, {"loaded_libraries", loaded_gpu_libraries()}};
  for (int i = 0; i < count; ++i) {
    out["devices"].push_back(device_metadata(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i))));
  }
  if (count == 0) out["devices"].push_back(device_metadata(at::Device(at::kCPU)));
  log_line(out.dump(2));
  if (args.require_gpu && count == 0) {
    log_error("error: no CUDA device visible");
    return kExitNoGpu;
  }
  return 0;
}

}  // namespace hetpar
