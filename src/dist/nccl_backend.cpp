// Compiled with USE_C10D_NCCL and the wheel's nccl.h; runs only where a GPU is.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "dist/backend_factory.hpp"

namespace hetpar {

std::string nccl_version() { return c10d::getNcclVersion(); }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::vector<int>& global_ranks, int rank,
                                                    std::chrono::milliseconds timeout, const at::Device& device) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  // Said, not inferred: a group infers them only if it is the process's first
  // NCCL group, and a split indexes them by the parent's ranks.
  options->global_ranks_in_group.assign(global_ranks.begin(), global_ranks.end());
  const int size = static_cast<int>(global_ranks.size());
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // Bound to this rank's GPU and connected now: an unbound group guesses its
  // device from the rank, and a lazily created communicator would be made at
  // the first collective, in whatever order ranks reach it.
  group->setBoundDeviceId(device);
  group->eagerConnectSingleDevice(device);
  return group;
}

c10::intrusive_ptr<c10d::Backend> split_nccl_backend(const c10::intrusive_ptr<c10d::Backend>& world,
                                                     const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::vector<int>& ranks,
                                                     std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  // ncclCommSplit over the world's communicator: collective over the world,
  // bound to its device and connected eagerly; a non-member gets null.
  return world->split(store, ranks, options);
}

}  // namespace hetpar
