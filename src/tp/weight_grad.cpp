#include "tp/weight_grad.hpp"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Values a bf16 holds exactly (eighths and quarters), so that every product
// and sum of the check is exact in fp32, and an addend of thirds, which no
// bf16 holds: a GEMM that rounded the addend or its result to bf16 fails.
at::Tensor exact_values(int64_t rows, int64_t cols, int modulo, double scale, const at::TensorOptions& on) {
  return (at::arange(rows * cols, on).remainder(modulo) - modulo / 2).div(scale).reshape({rows, cols});
}

// aten's GEMMs that write fp32 from bf16 operands, found by name in the
// dispatcher: a LibTorch without them still builds, and answers no.
using MmTo = at::Tensor(const at::Tensor&, const at::Tensor&, at::ScalarType);
using AddmmOutTo = at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::ScalarType,
                               const at::Scalar&, const at::Scalar&, at::Tensor&);
struct Fp32OutputGemms {
  std::optional<c10::TypedOperatorHandle<MmTo>> mm;               // aten::mm.dtype
  std::optional<c10::TypedOperatorHandle<AddmmOutTo>> addmm_out;  // aten::addmm.dtype_out
};
const Fp32OutputGemms& fp32_output_gemms() {
  static const Fp32OutputGemms gemms = [] {
    Fp32OutputGemms g;
    c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
    try {
      if (const auto mm = dispatcher.findSchema({"aten::mm", "dtype"})) g.mm = mm->typed<MmTo>();
      if (const auto addmm = dispatcher.findSchema({"aten::addmm", "dtype_out"})) g.addmm_out = addmm->typed<AddmmOutTo>();
    } catch (const c10::Error&) {  // another signature than this one's: not used
      g = {};
    }
    return g;
  }();
  return gemms;
}

// a · b in fp32 from bf16 operands; c += a · b in place, in fp32.
at::Tensor mm_to_fp32(const at::Tensor& a, const at::Tensor& b) { return fp32_output_gemms().mm->call(a, b, at::kFloat); }
void add_mm_into_fp32(at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
  fp32_output_gemms().addmm_out->call(c, a, b, at::kFloat, 1, 1, c);
}

bool ask_device(const at::Device& device) {
  if (!libtorch_has_fp32_output_gemms()) return false;
  try {
    const at::NoGradGuard no_grad;
    const at::TensorOptions fp32 = at::TensorOptions(at::kFloat).device(device);
    // A weight's rows of a fused gradient, as in use: a strided slice, transposed.
    const at::Tensor grad_rows = exact_values(64, 80, 17, 8, fp32), input_rows = exact_values(64, 32, 13, 4, fp32);
    const at::Tensor addend = exact_values(48, 32, 11, 3, fp32);
    const at::Tensor want = grad_rows.narrow(1, 16, 48).t().mm(input_rows);
    const at::Tensor part = grad_rows.to(at::kBFloat16).narrow(1, 16, 48).t(), input = input_rows.to(at::kBFloat16);
    const at::Tensor made = mm_to_fp32(part, input);
    at::Tensor added = addend.clone();
    add_mm_into_fp32(added, part, input);
    return made.scalar_type() == at::kFloat && added.scalar_type() == at::kFloat && at::equal(made, want) &&
           at::allclose(added, addend + want, 1e-6, 1e-6);
  } catch (const c10::Error&) {
    return false;  // this release refuses the form
  }
}

// y = x · copyᵀ (+ bias), x cast to the copy's precision as autocast would;
// the backward adds the trained weights' gradients into their .grad
// (add_weight_gradients) and returns none for them, so autograd neither casts
// nor accumulates them; their accumulation nodes still run after this one
// (the gradient buckets' hooks, train/grad_reducer.hpp).
struct CopyLinear : torch::autograd::Function<CopyLinear> {
  // `bias`: none or one (as a list: autograd takes no undefined tensor as an input).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList into, const at::Tensor& copy,
                            at::TensorList bias) {
    const at::Tensor input = x.scalar_type() == copy.scalar_type() ? x : x.to(copy.scalar_type());
    ctx->saved_data["into"] = into.vec();
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->save_for_backward({input, copy});
    ctx->saved_data["biased"] = !bias.empty();
    return at::linear(input, copy, bias.empty() ? at::Tensor() : bias[0]);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &copy = saved[1];
    const std::vector<at::Tensor> into = ctx->saved_data["into"].toTensorVector();
    const bool biased = ctx->saved_data["biased"].toBool();
    tensor_list out(into.size() + 2 + (biased ? 1 : 0));  // x, into..., copy, bias
    const at::Tensor& grad = grads[0];
    if (!grad.defined()) return out;
    // The weights' gradients first, each added in and freed before the input's is made.
    const at::Tensor grad_rows = grad.reshape({-1, grad.size(-1)});
    add_weight_gradients(into, grad_rows, input.reshape({-1, input.size(-1)}));
    if (biased && ctx->needs_input_grad(into.size() + 2)) out.back() = grad_rows.sum(0);
    if (ctx->needs_input_grad(0)) {
      out[0] = grad.matmul(copy).to(static_cast<at::ScalarType>(ctx->saved_data["x_type"].toInt()));
    }
    return out;
  }
};

}  // namespace

bool libtorch_has_fp32_output_gemms() { return fp32_output_gemms().mm && fp32_output_gemms().addmm_out; }

bool gemm_adds_into_fp32(const at::Device& device) {
  static std::mutex mutex;
  static std::map<std::pair<c10::DeviceType, int>, bool> answers;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::pair<c10::DeviceType, int> key{device.type(), device.index()};
  const auto found = answers.find(key);
  if (found != answers.end()) return found->second;
  return answers[key] = ask_device(device);
}

at::Tensor gemm_linear(const at::Tensor& x, const GemmWeight& w, const at::Tensor& bias) {
  if (w.into.empty()) return at::linear(x, w.value, bias);
  std::vector<at::Tensor> biases;
  if (bias.defined()) biases.push_back(bias);
  return CopyLinear::apply(x, at::TensorList(w.into), w.value, at::TensorList(biases));
}

void add_weight_gradients(const std::vector<at::Tensor>& into, const at::Tensor& grad_rows, const at::Tensor& input_rows) {
  if (grad_rows.scalar_type() == at::kFloat || !gemm_adds_into_fp32(grad_rows.device())) {
    // Every weight's rows in the operands' precision, then added in.
    add_rows_into_grads(into, grad_rows.t().mm(input_rows));
    return;
  }
  int64_t first = 0;
  for (at::Tensor weight : into) {  // a handle: its .grad is the weight's own
    const int64_t rows = weight.size(0);
    first += rows;
    if (!weight.requires_grad()) continue;
    at::Tensor& grad = weight.mutable_grad();
    const at::Tensor part = grad_rows.narrow(1, first - rows, rows).t();
    if (grad.defined()) {
      add_mm_into_fp32(grad, part, input_rows);
    } else {
      grad = mm_to_fp32(part, input_rows);
    }
  }
}

}  // namespace hetpar
