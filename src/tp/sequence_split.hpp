// Sequence parallelism: around a TP layer's sharded part each rank of the TP
// group holds a contiguous 1/tp of the sequence (dim 1 of [B, S, hidden])
// instead of all of it. What a replicated layout all-reduces becomes a
// reduce-scatter along the sequence, and a layer that reads the whole
// sequence all-gathers it first: the same bytes on the wire, but the norms,
// the residual stream and what they save for the backward shrink by tp.
//
//   gather_sequence        [B, S/tp, h] -> [B, S, h]; backward: the
//                          gradient summed over the group, this rank's part
//                          kept (reduce-scatter)
//   sum_scatter_sequence   partial sums [B, S, h] -> this rank's part of the
//                          sum [B, S/tp, h]; backward: all-gather
//
// A group of one returns its input. S must divide by the group's size.
#pragma once

#include <ATen/core/Tensor.h>

#include "dist/group.hpp"

namespace hetpar {

// How the activations around a TP layer lie over its group: every rank the
// whole sequence, or each a contiguous 1/tp of it (sequence parallelism).
enum class TpSequence { kWhole, kSplit };

at::Tensor gather_sequence(const at::Tensor& x, Group& tp);
at::Tensor sum_scatter_sequence(const at::Tensor& x, Group& tp);

}  // namespace hetpar
