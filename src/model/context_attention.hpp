// Causal attention with the LLM's sequence split over a context-parallel (CP)
// group. Each sample's sequence is cut into 2·cp equal chunks and CP rank r
// holds chunks r and 2·cp−1−r (one from each end, so every rank has the same
// causal work). K and V are all-gathered over the CP group (their gradients
// reduce-scattered back); each local query chunk then attends to the keys up
// to its own end, masked by global position. Why gather rather than a ring:
// docs/design.md, "Context parallelism".
#pragma once

#include <ATen/core/Tensor.h>

#include "dist/group.hpp"

namespace hetpar {

// The global positions a CP rank holds of a sequence of `seq_len` tokens, in
// ascending order (chunk r, then chunk 2·cp−1−r): [seq_len / cp] int64.
at::Tensor cp_positions(int64_t seq_len, int cp_rank, int cp_size);

// q [B, H, S_local, d], k and v [B, H_kv, S_local, d] of this rank's two
// chunks (in cp_positions order). Returns [B, H, S_local, d]. Grouped-query
// when H_kv < H. A CP group of one is plain causal attention.
at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Group& cp);

}  // namespace hetpar
