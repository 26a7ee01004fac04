#include "model/norms.hpp"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Each row's 1 / sqrt(mean(x^2) + eps), fp32, [..., 1].
at::Tensor reciprocal_rms(const at::Tensor& x32, double eps) { return at::rsqrt(x32.square().mean(-1, true).add_(eps)); }

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor x32 = x.to(at::kFloat);
    const at::Tensor rstd = reciprocal_rms(x32, eps);
    ctx->save_for_backward({x, weight, rstd});
    return (x32 * rstd * weight).to(x.scalar_type());
  }

  // With n = x * rstd and g = dy * weight:
  //   d weight = sum over rows of dy * n,  dx = rstd * (g - n * mean(g * n)).
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].to(at::kFloat);
    const at::Tensor n = x.to(at::kFloat) * rstd;
    at::Tensor d_weight;
    if (ctx->needs_input_grad(1)) {
      d_weight = (dy * n).reshape({-1, n.size(-1)}).sum(0).to(weight.scalar_type());
    }
    at::Tensor d_x;
    if (ctx->needs_input_grad(0)) {
      at::Tensor g = dy * weight;
      const at::Tensor mean_gn = (g * n).mean(-1, true);
      d_x = g.addcmul_(n, mean_gn, -1).mul_(rstd).to(x.scalar_type());  // in place: g is this function's own
    }
    return {d_x, d_weight, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (rms_norm_backward_is_unfused(x.device())) return RmsNormFunction::apply(x, weight, eps);
  if (x.scalar_type() == at::kFloat) return at::rms_norm(x, {weight.size(0)}, weight, eps);
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return at::rms_norm(x, {weight.size(0)}, weight.to(x.scalar_type()), eps);
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (x.scalar_type() == at::kFloat) return at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return at::layer_norm(x, {weight.size(0)}, weight.to(x.scalar_type()), bias.to(x.scalar_type()), eps);
}

bool rms_norm_backward_is_unfused(const at::Device& device) { return !device.is_cuda(); }

}  // namespace hetpar
