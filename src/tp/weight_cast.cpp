#include "tp/weight_cast.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <unordered_map>

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Forward: the weight cast to the compute precision. Backward: the gradient
// added into the weight's own .grad here, in place and in fp32, and none
// returned, so autograd neither casts it nor accumulates it a second time.
struct CastForCompute : torch::autograd::Function<CastForCompute> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, at::ScalarType dtype) {
    ctx->saved_data["weight"] = weight;
    return weight.to(dtype);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    at::Tensor weight = ctx->saved_data["weight"].toTensor();
    at::Tensor& grad = weight.mutable_grad();
    if (grad.defined()) {
      grad.add_(grads[0]);
    } else {
      grad = grads[0].to(weight.scalar_type(), /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
    }
    return {at::Tensor(), at::Tensor()};
  }
};

// This thread's open step (forwards run on the thread that opened it) and the
// copies made in it, by weight.
struct StepCasts {
  int open = 0;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> copies;
};
thread_local StepCasts step_casts;

}  // namespace

at::Tensor compute_weight(const at::Tensor& weight, const at::Tensor& input) {
  const c10::DeviceType device = input.device().type();
  if (!weight.defined() || !at::autocast::is_autocast_enabled(device) || weight.scalar_type() != at::kFloat) {
    return weight;
  }
  const at::ScalarType dtype = at::autocast::get_lower_precision_fp_from_device_type(device);
  if (!weight.requires_grad()) return at::autocast::cached_cast(dtype, weight, device);
  if (step_casts.open == 0) return CastForCompute::apply(weight, dtype);
  at::Tensor& copy = step_casts.copies[weight.unsafeGetTensorImpl()];
  if (!copy.defined()) copy = CastForCompute::apply(weight, dtype);
  return copy;
}

StepCastCache::StepCastCache(bool enabled) : enabled_(enabled) {
  if (enabled_) ++step_casts.open;
}

StepCastCache::~StepCastCache() {
  if (enabled_ && --step_casts.open == 0) step_casts.copies.clear();
}

}  // namespace hetpar
