// Compiled with USE_C10D_NCCL and the wheel's nccl.h; runs only where a GPU is.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "dist/backend_factory.hpp"

namespace hetpar {

std::string nccl_version() { return c10d::getNcclVersion(); }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout, const at::Device& device) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // Bound to this rank's GPU and connected now: an unbound group guesses its
  // device from the rank, and a lazily created communicator would be made at
  // the first collective, in whatever order ranks reach it.
  group->setBoundDeviceId(device);
  group->eagerConnectSingleDevice(device);
  return group;
}

}  // namespace hetpar
