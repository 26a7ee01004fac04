// Compiled with USE_C10D_NCCL and the wheel's nccl.h; runs only where a GPU is.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "dist/backend_factory.hpp"

namespace hetpar {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

}  // namespace hetpar
