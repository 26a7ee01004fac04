// The communication operators of tensor parallelism, as autograd functions
// named for what they do forward and backward. Each takes the TP group.
//
//   identity_fwd_allreduce_bwd   input of a column-parallel layer: every rank
//                                holds the whole input; the input's gradient
//                                is the sum of every rank's partial gradient.
//   allreduce_fwd_identity_bwd   output of a row-parallel layer: partial sums
//                                become the full output.
//   allgather_fwd_split_bwd      last dim sharded -> full (gather_output).
//   split_fwd_allgather_bwd      last dim full -> this rank's shard.
#pragma once

#include <ATen/core/Tensor.h>

#include "dist/group.hpp"

namespace hetpar {

at::Tensor identity_fwd_allreduce_bwd(const at::Tensor& x, Group& tp);
at::Tensor allreduce_fwd_identity_bwd(const at::Tensor& x, Group& tp);
at::Tensor allgather_fwd_split_bwd(const at::Tensor& x, Group& tp);
at::Tensor split_fwd_allgather_bwd(const at::Tensor& x, Group& tp);

// Without autograd: all-gather along the last dimension.
at::Tensor all_gather_last_dim(const at::Tensor& x, Group& group);

}  // namespace hetpar
