// The residual stream's sum: a layer's input plus what its attention or MLP
// made, in the stream's own type. The stream is fp32 unless
// run.fp32_residual = false makes it bf16; a row-parallel layer with a bias
// (the encoder's) hands back fp32 even under autocast, since its fp32 bias is
// added after the GEMM, and adding that to a bf16 stream would turn the
// stream fp32 for every layer after it.
#pragma once

#include <ATen/ATen.h>

namespace hetpar {

inline at::Tensor residual_add(const at::Tensor& x, const at::Tensor& made) {
  const at::Tensor sum = x + made;
  return sum.scalar_type() == x.scalar_type() ? sum : sum.to(x.scalar_type());
}

}  // namespace hetpar
