// Under sequence parallelism a weight replicated over the TP group that meets
// only this rank's part of the sequence (a norm's scale, a row-parallel
// layer's bias) gets only that part's gradient. Its whole gradient is the sum
// over the group. Summing it in every micro-batch's backward costs two
// latency-bound collectives a layer a micro-batch; instead the trainer sums
// all of a module's such gradients once a step, in one all-reduce, after the
// data-parallel sum (train/partial_grad_sum.hpp). Whoever runs a backward on a
// split model without the trainer sums them with sum_over_group.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <vector>

#include "dist/group.hpp"

namespace hetpar {

// The parameters under `root` whose gradient on a rank is only its part of
// the sequence's, in the modules' registration order (the same on every TP rank).
std::vector<at::Tensor> tp_partial_parameters(torch::nn::Module& root);

// Sums `tensors` (one dtype, each contiguous) over `group` in place, in one
// all-reduce of their concatenation. A group of one leaves them as they are.
void sum_over_group(const std::vector<at::Tensor>& tensors, Group& group);

}  // namespace hetpar
