// Rotary position embeddings, half-rotation convention: channel i rotates
// with channel i + d/2 by angle pos / theta^(2i/d). One autograd function:
// the forward writes the rotated halves straight into its output (no
// rotate-half copy, no concatenation), the backward is the inverse rotation,
// and nothing but the tables is saved for it.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace hetpar {

// cos and sin of every (position, channel pair) for positions [0, seq):
// two [seq, head_dim / 2] tables.
std::pair<at::Tensor, at::Tensor> rope_tables(int64_t seq, int64_t head_dim, double theta);

// x: [..., seq, head_dim] (any strides); cos, sin: [seq, head_dim / 2].
// Returns a new tensor: for [B, heads, seq, head_dim], laid out sequence
// first ([B, seq, heads, head_dim] in memory), otherwise contiguous.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace hetpar
