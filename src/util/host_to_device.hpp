// Host tensors (a batch, an index list) on the device without blocking the
// host: pinned, then copied asynchronously on the current stream. A blocking
// copy from pageable memory waits for the stream to drain, the host sync a
// step must not have (HETPAR_CHECK_HOST_SYNCS=1 catches it); the caching host
// allocator keeps the pinned block until the copy is done.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace hetpar {

inline at::Tensor host_to_device(const at::Tensor& host, const at::Device& device) {
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

inline at::Tensor index_on(const std::vector<int64_t>& index, const at::Device& device) {
  return host_to_device(at::tensor(index, at::kLong), device);
}

}  // namespace hetpar
