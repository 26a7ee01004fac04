// The device a rank computes on, and what only a GPU needs: choosing and
// setting it before any CUDA or NCCL call, a bounded wait for the work a
// step queued (the step's one host sync), the caching allocator's peak
// memory, and the names and versions every result records.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include "config/run_config.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

// CUDA devices this process can use (0 without a driver or a device).
int visible_cuda_devices();

// This rank's device for a resolved config (config/device_choice.hpp): the
// CPU, or GPU LOCAL_RANK, made the current device, with the run's TF32
// setting applied. Throws ConfigError when the node has fewer GPUs than ranks.
at::Device select_device(const RunConfig& config, const LaunchEnv& env);

// "NVIDIA H200" for a GPU, the processor's model name for the CPU.
std::string device_name(const at::Device& device);

// Returns once the device has done the work queued so far; on the CPU at
// once. A GPU whose queue does not drain within `timeout` (a collective
// waiting on a peer that died or hangs) throws CollectiveError saying so,
// instead of blocking forever or leaving it to a watchdog's abort.
void wait_for_device(const at::Device& device, std::chrono::milliseconds timeout);

// Peak memory of this rank since the last reset: on a GPU the caching
// allocator's peak of allocated bytes, on the CPU the process's peak RSS
// (which cannot be reset: the peak since start).
void reset_peak_memory(const at::Device& device);
double peak_memory_bytes(const at::Device& device);
// Peak bytes of tensor storage since the last reset, on either device: the
// caching allocator's peak on a GPU, the counting allocator's on the CPU
// (metrics/cpu_tensor_memory.hpp; 0 when it is not installed). What the
// memory model predicts, less the runtime's reserved part.
double peak_tensor_bytes(const at::Device& device);

// While alive on a GPU with HETPAR_CHECK_HOST_SYNCS=1 in the environment,
// any operation that blocks the host on the device (a read of a value, a
// data-dependent size) throws, naming the operation: how the GPU check
// proves a step queues its work without waiting. Does nothing otherwise.
class HostSyncCheck {
 public:
  explicit HostSyncCheck(const at::Device& device);
  ~HostSyncCheck();
  HostSyncCheck(const HostSyncCheck&) = delete;
  HostSyncCheck& operator=(const HostSyncCheck&) = delete;

 private:
  bool active_ = false;
};

// Bytes of the GPU in use by anything (the CUDA context and communicator
// buffers included, which the allocator does not count); 0 on the CPU.
double device_bytes_in_use(const at::Device& device);

// What a result must say about the device: name, memory, and on a GPU the
// driver, CUDA runtime and NCCL versions and whether TF32 is allowed.
nlohmann::json device_metadata(const at::Device& device);

}  // namespace hetpar
