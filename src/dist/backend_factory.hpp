// Makes the c10d backend of one process group: Gloo for CPU tensors, NCCL for
// CUDA tensors. The only place that names a concrete backend class.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace hetpar {

// `store` is already prefixed for this group; blocks until every member joined.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr);
// "2.28.9": the NCCL this process loaded (its own library, not a header's).
std::string nccl_version();

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout, const at::Device& device);

}  // namespace hetpar
