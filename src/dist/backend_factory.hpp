// Makes the c10d backend of one process group: Gloo for CPU tensors, NCCL for
// CUDA tensors. The only place that names a concrete backend class.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace hetpar {

// `store` is already prefixed for this group; blocks until every member joined.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr);
// Whether `backend` ("gloo", "nccl") copies a reduce-scatter's input before
// reducing it: Gloo's does (its reduce_scatter_single clones the input), a
// transient the memory model counts; NCCL reduces from the input itself.
bool reduce_scatter_copies_input(const std::string& backend);
// "2.28.9": the NCCL this process loaded (its own library, not a header's).
std::string nccl_version();

// `global_ranks`: the members' job ranks, ascending; `rank`: this one's index in them.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::vector<int>& global_ranks, int rank,
                                                    std::chrono::milliseconds timeout, const at::Device& device);
// A sub-group over `ranks` (the world's ranks, ascending) split from the
// world's NCCL communicator; every rank of the world calls it in the same
// order. Null on a rank not in `ranks`.
c10::intrusive_ptr<c10d::Backend> split_nccl_backend(const c10::intrusive_ptr<c10d::Backend>& world,
                                                     const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::vector<int>& ranks,
                                                     std::chrono::milliseconds timeout);

}  // namespace hetpar
