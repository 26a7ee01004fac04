// Sequence parallelism: around a TP layer's sharded part each rank of the TP
// group holds a contiguous 1/tp of the sequence (dim 1 of [B, S, hidden])
// instead of all of it. What a replicated layout all-reduces becomes a
// reduce-scatter along the sequence, and a layer that reads the whole
// sequence all-gathers it first (tp/parallel_linear.cpp, which keeps only
// the part for its backward): the same bytes on the wire, but the norms, the
// residual stream and what they save for the backward shrink by tp.
//
//   sum_scatter_sequence    partial sums [B, S, h] -> this rank's part of
//                           the sum [B, S/tp, h]; backward: all-gather
//   all_gather_sequence     [B, S/tp, h] -> [B, S, h], no autograd
//   reduce_scatter_sequence [B, S, h] summed -> this rank's part, no autograd
//
// A group of one returns its input. S must divide by the group's size.
#pragma once

#include <ATen/core/Tensor.h>

#include "dist/group.hpp"

namespace hetpar {

// How the activations around a TP layer lie over its group: every rank the
// whole sequence, or each a contiguous 1/tp of it (sequence parallelism).
enum class TpSequence { kWhole, kSplit };

at::Tensor sum_scatter_sequence(const at::Tensor& x, Group& tp);
at::Tensor all_gather_sequence(const at::Tensor& x, Group& tp);
at::Tensor reduce_scatter_sequence(const at::Tensor& x, Group& tp);

}  // namespace hetpar
