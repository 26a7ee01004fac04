#include "model/rope.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace hetpar {
namespace {

// A new tensor of x's shape [B, H, S, d], laid out sequence first in memory
// ([B, S, H, d], the projections' own layout): attention kernels then give
// their output in that layout too, and the output projection reads it as a
// view rather than saving a copy of it for its backward.
at::Tensor sequence_major(const at::Tensor& x) {
  if (x.dim() != 4) return at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  return at::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options()).transpose(1, 2);
}

// out = rotate(x) by +angle (sign 1) or -angle (sign -1):
//   out_lo = x_lo * cos - sign * x_hi * sin,  out_hi = x_hi * cos + sign * x_lo * sin
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos_table, const at::Tensor& sin_table, double sign) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor cos = cos_table.to(x.scalar_type()), sin = sin_table.to(x.scalar_type());  // bf16 under autocast
  const at::Tensor lo = x.narrow(-1, 0, half), hi = x.narrow(-1, half, half);
  at::Tensor out = sequence_major(x);
  at::Tensor out_lo = out.narrow(-1, 0, half), out_hi = out.narrow(-1, half, half);
  at::mul_out(out_lo, lo, cos);
  out_lo.addcmul_(hi, sin, -sign);
  at::mul_out(out_hi, hi, cos);
  out_hi.addcmul_(lo, sin, sign);
  return out;
}

struct Rope : torch::autograd::Function<Rope> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    return rotate(x, cos, sin, 1.0);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    // A rotation's adjoint is the rotation back.
    return {rotate(grads[0], ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), -1.0),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> rope_tables(int64_t seq, int64_t head_dim, double theta) {
  const at::Tensor inv_freq =
      1.0 / at::pow(theta, at::arange(0, head_dim, 2, at::kDouble) / static_cast<double>(head_dim));
  const at::Tensor angles = at::outer(at::arange(seq, at::kDouble), inv_freq);
  return {angles.cos().to(at::kFloat), angles.sin().to(at::kFloat)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return Rope::apply(x, cos, sin);
}

}  // namespace hetpar
