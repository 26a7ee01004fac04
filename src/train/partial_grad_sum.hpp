// Once a step, after the DP x CP sum: the LLM's gradients that sequence
// parallelism leaves partial on each TP rank (tp/partial_grads.hpp) summed
// over its TP group in one all-reduce. The two sums commute (each is a sum
// over ranks), so summing over TP after the reducer gives the whole gradient
// on every rank, as summing in every micro-batch's backward did, for one
// collective a step instead of two a layer a micro-batch.
//
// Where the reducer shards the optimizer state, a member holds only its
// segments of the DP sum; those are summed instead. Every TP rank of a
// DP x CP member has the same segments: the layout divides every sharded
// dimension by tp (config/run_config.cpp), so the ranks' parameter lists,
// buckets and ranges match.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "dist/group.hpp"
#include "train/grad_reducer.hpp"

namespace hetpar {

class PartialGradSum {
 public:
  // `partial`: parameters with TP-partial gradients (those that train are
  // summed); `reducer`: the module's DP x CP reducer (null where there is none).
  PartialGradSum(std::vector<at::Tensor> partial, Group& tp, const GradReducer* reducer);
  // After the reducer's finish(). A parameter without a gradient counts as zeros.
  void sum();

 private:
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> segments_;  // sharded: this member's segments' gradients, in the reducer's order
  bool sharded_;
  Group& tp_;
};

}  // namespace hetpar
