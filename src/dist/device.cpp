#include "dist/device.hpp"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <cstdlib>
#include <thread>

#include "config/device_choice.hpp"
#include "dist/backend_factory.hpp"
#include "dist/group.hpp"
#include "metrics/compute_peak.hpp"
#include "metrics/cpu_tensor_memory.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

// "13.0" from CUDA's 13000.
std::string cuda_version_text(int version) { return fmt::format("{}.{}", version / 1000, (version % 1000) / 10); }

double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

}  // namespace

int visible_cuda_devices() {
  try {
    return static_cast<int>(c10::cuda::device_count());
  } catch (const std::exception&) {
    return 0;  // no driver: no device
  }
}

at::Device select_device(const RunConfig& config, const LaunchEnv& env) {
  if (config.runtime.device != "cuda") return at::Device(at::kCPU);
  const int index = cuda_device_index(env.local_rank, env.local_world_size, visible_cuda_devices());
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  // The one TF32 switch hetpar uses (mixing it with the newer per-backend
  // precision setters is an error at the first matmul).
  at::globalContext().setAllowTF32CuBLAS(config.runtime.tf32);
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  set_log_device(fmt::format("{}, {}", device.str(), device_name(device)));
  return device;
}

std::string device_name(const at::Device& device) {
  if (!device.is_cuda()) return cpu_device_name();
  return at::cuda::getDeviceProperties(device.index())->name;
}

void wait_for_device(const at::Device& device, std::chrono::milliseconds timeout) {
  if (!device.is_cuda()) return;
  at::cuda::CUDAEvent done;
  done.record(at::cuda::getCurrentCUDAStream(device.index()));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(20);
  while (!done.query()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw CollectiveError(fmt::format(
          "the work queued on {} did not finish within runtime.timeout_s = {:.0f} s: a collective waits on a peer "
          "that died or hangs", device.str(), std::chrono::duration<double>(timeout).count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

HostSyncCheck::HostSyncCheck(const at::Device& device) {
  const char* flag = std::getenv("HETPAR_CHECK_HOST_SYNCS");
  active_ = device.is_cuda() && flag != nullptr && std::string(flag) == "1";
  if (active_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
}

HostSyncCheck::~HostSyncCheck() {
  if (active_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
}

void reset_peak_memory(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  reset_cpu_tensor_peak();
}

double peak_memory_bytes(const at::Device& device) {
  if (!device.is_cuda()) return peak_resident_bytes();
  return peak_tensor_bytes(device);
}

double peak_tensor_bytes(const at::Device& device) {
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
  }
  return cpu_tensor_counter_installed() ? static_cast<double>(cpu_tensor_peak_bytes()) : 0;
}

double device_bytes_in_use(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<double>(total - free);
}

nlohmann::json device_metadata(const at::Device& device) {
  nlohmann::json meta = {{"device", device_name(device)}, {"device_type", device.is_cuda() ? "cuda" : "cpu"}};
  if (!device.is_cuda()) return meta;
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(device.index());
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  meta["device_memory_mib"] = static_cast<double>(props->totalGlobalMem) / (1 << 20);
  meta["compute_capability"] = fmt::format("{}.{}", props->major, props->minor);
  meta["cuda_driver"] = cuda_version_text(driver);
  meta["cuda_runtime"] = cuda_version_text(runtime);
  meta["nccl_version"] = nccl_version();
  meta["tf32_matmul"] = at::globalContext().allowTF32CuBLAS();
  return meta;
}

}  // namespace hetpar
