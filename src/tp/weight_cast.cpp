#include "tp/weight_cast.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <algorithm>
#include <map>

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Forward: `copy`, the weights' compute-precision copy (concatenated along
// dim 0 when there are several). Backward: each weight's rows of the gradient
// added into its own .grad here, in place and in fp32, and none returned, so
// autograd neither casts them nor accumulates them a second time.
struct UseComputeCopy : torch::autograd::Function<UseComputeCopy> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList weights, const at::Tensor& copy) {
    ctx->saved_data["weights"] = weights.vec();
    return copy;  // an input returned: autograd hands out a view of it
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const std::vector<at::Tensor> weights = ctx->saved_data["weights"].toTensorVector();
    add_rows_into_grads(weights, grads[0]);
    return tensor_list(weights.size() + 1);
  }
};

// The weights cast to `dtype` and concatenated along dim 0, in one pass.
at::Tensor cast_copy(const std::vector<at::Tensor>& weights, at::ScalarType dtype) {
  const at::NoGradGuard no_grad;
  if (weights.size() == 1) return weights[0].to(dtype);
  std::vector<int64_t> shape = weights[0].sizes().vec();
  shape[0] = 0;
  for (const at::Tensor& w : weights) shape[0] += w.size(0);
  at::Tensor copy = at::empty(shape, weights[0].options().dtype(dtype));
  int64_t row = 0;
  for (const at::Tensor& w : weights) {
    copy.narrow(0, row, w.size(0)).copy_(w);
    row += w.size(0);
  }
  return copy;
}

// This thread's open step (forwards run on the thread that opened it) and the
// copies made in it, by the weights they hold.
struct StepCasts {
  int open = 0;
  std::map<std::vector<const c10::TensorImpl*>, at::Tensor> copies;
};
thread_local StepCasts step_casts;

bool autocasts(const at::Tensor& weight, const at::Tensor& input) {
  return weight.defined() && weight.scalar_type() == at::kFloat &&
         at::autocast::is_autocast_enabled(input.device().type());
}

bool trains(const std::vector<at::Tensor>& weights) {
  return std::any_of(weights.begin(), weights.end(), [](const at::Tensor& w) { return w.requires_grad(); });
}

// The compute copy of `weights` (all autocast ones): this step's while a
// StepCastCache is open, else a fresh one; a frozen weight's is never kept,
// as autocast does.
at::Tensor step_copy(const std::vector<at::Tensor>& weights, const at::Tensor& input) {
  const at::ScalarType dtype = at::autocast::get_lower_precision_fp_from_device_type(input.device().type());
  if (!trains(weights) || step_casts.open == 0) return cast_copy(weights, dtype);
  std::vector<const c10::TensorImpl*> key;
  for (const at::Tensor& w : weights) key.push_back(w.unsafeGetTensorImpl());
  at::Tensor& cached = step_casts.copies[key];
  if (!cached.defined()) cached = cast_copy(weights, dtype);
  return cached;
}

// The copy through this micro-batch's own node when any weight trains.
at::Tensor compute_copy(const std::vector<at::Tensor>& weights, const at::Tensor& input) {
  const at::Tensor copy = step_copy(weights, input);
  if (!trains(weights)) return copy;
  return UseComputeCopy::apply(at::TensorList(weights), copy);
}

GemmWeight copy_for_gemm(const std::vector<at::Tensor>& weights, const at::Tensor& input) {
  GemmWeight g{step_copy(weights, input), {}};
  if (trains(weights)) g.into = weights;
  return g;
}

}  // namespace

void add_rows_into_grads(const std::vector<at::Tensor>& weights, const at::Tensor& gradient) {
  int64_t row = 0;
  for (at::Tensor weight : weights) {  // a handle: its .grad is the weight's own
    const at::Tensor part = gradient.narrow(0, row, weight.size(0));
    row += weight.size(0);
    if (!weight.requires_grad()) continue;
    at::Tensor& grad = weight.mutable_grad();
    if (grad.defined()) {
      grad.add_(part);
    } else {
      grad = part.to(weight.scalar_type(), /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
    }
  }
}

at::Tensor compute_weight(const at::Tensor& weight, const at::Tensor& input) {
  if (!autocasts(weight, input)) return weight;
  return compute_copy({weight}, input);
}

at::Tensor fused_compute_weight(const std::vector<at::Tensor>& weights, const at::Tensor& input) {
  if (weights.empty() || !std::all_of(weights.begin(), weights.end(),
                                      [&](const at::Tensor& w) { return autocasts(w, input); })) {
    return at::Tensor();
  }
  return compute_copy(weights, input);
}

GemmWeight gemm_weight(const at::Tensor& weight, const at::Tensor& input) {
  if (!autocasts(weight, input)) return {weight, {}};
  return copy_for_gemm({weight}, input);
}

std::optional<GemmWeight> fused_gemm_weight(const std::vector<at::Tensor>& weights, const at::Tensor& input) {
  if (weights.empty() || !std::all_of(weights.begin(), weights.end(),
                                      [&](const at::Tensor& w) { return autocasts(w, input); })) {
    return std::nullopt;
  }
  return copy_for_gemm(weights, input);
}

StepCastCache::StepCastCache(bool enabled) : enabled_(enabled) {
  if (enabled_) ++step_casts.open;
}

StepCastCache::~StepCastCache() {
  if (enabled_ && --step_casts.open == 0) step_casts.copies.clear();
}

}  // namespace hetpar
