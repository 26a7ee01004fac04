// The optimizer state sharded over a module's data-parallel (x CP) group
// (`optim.shard_state`): which targets the rank's AdamW updates, and the
// full state a checkpoint writes and reads. The reduce-scatter of the
// gradients and the all-gather of the updated weights are the reducer's
// (train/grad_reducer.hpp); each step runs
//
//   backward -> reduce-scatter buckets -> norm over segments (all-reduce)
//            -> clip, AdamW on this rank's segments -> all-gather buckets
//
// A checkpoint keeps the format of an unsharded run (every parameter's whole
// state on every rank's file), so a run can resume sharded or not, under any
// layout, from either.
#pragma once

#include <ATen/core/Tensor.h>

#include <unordered_map>
#include <vector>

#include "train/fused_adamw.hpp"
#include "train/grad_reducer.hpp"

namespace hetpar {

// One target a parameter: the segment this rank updates for those a
// sharding reducer holds (none where another rank updates all of it),
// the whole parameter otherwise.
std::vector<FusedAdamW::Target> optimizer_targets(const std::vector<at::Tensor>& params,
                                                  const std::vector<const GradReducer*>& reducers);

// Every parameter's whole AdamW state (undefined members for a frozen one):
// the optimizer's own tensors where it holds them whole, gathered over the
// group onto the host for a sharding reducer's (a collective on each of
// their groups, on every member, in the reducers' order).
class FullOptimizerState {
 public:
  FullOptimizerState(const FusedAdamW& optimizer, const std::vector<const GradReducer*>& reducers);
  FusedAdamW::State of(const at::Tensor& param) const;

 private:
  const FusedAdamW& optimizer_;
  std::unordered_map<const void*, FusedAdamW::State> gathered_;
};

// Copies a parameter's whole state tensor `whole` (from a checkpoint, of the
// parameter's shape) into the optimizer's `into`, which holds all of it or
// the segment at `offset` of its flattened values.
void load_state_part(at::Tensor into, const at::Tensor& whole, int64_t offset);

}  // namespace hetpar
