#include "tp/parallel_linear.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "model/param_init.hpp"
#include "tp/autograd_context.hpp"
#include "tp/sequence_split.hpp"
#include "tp/tp_comm_ops.hpp"
#include "tp/weight_cast.hpp"
#include "tp/weight_grad.hpp"

namespace hetpar {

at::Tensor full_linear_weight(const LinearSpec& s) {
  return init_normal(s.seed, s.name + ".weight", {s.out, s.in}, s.init_std);
}

// Biases start at zero in most recipes; a small random start makes the tests
// see a wrongly sharded or doubly added bias.
at::Tensor full_linear_bias(const LinearSpec& s) {
  return init_normal(s.seed, s.name + ".bias", {s.out}, s.init_std);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Column-parallel GEMMs on a sequence split over TP: the parts gathered into
// the whole sequence, each output = whole · weight^T + bias. Only this rank's
// part is kept for the backward, which gathers it again for the weights'
// gradients (an all-gather more, where keeping the whole would hold
// 1 - 1/tp of the input's bytes a layer until the backward) and
// reduce-scatters the input's gradient back into parts. Weights as GEMMs read
// them (`values`); the fp32 weights whose .grad a copy's gradient goes into
// (`into`, `into_counts` of them for each value, tp/weight_grad.hpp).
struct GatheredLinears : torch::autograd::Function<GatheredLinears> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& part, at::TensorList values, at::TensorList into,
                             const std::vector<int64_t>& into_counts, at::TensorList biases, Group* g) {
    save_pointer(ctx, "group", g);
    std::vector<at::Tensor> saved{part};
    saved.insert(saved.end(), values.begin(), values.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["into"] = into.vec();
    ctx->saved_data["into_counts"] = into_counts;
    ctx->saved_data["biases"] = static_cast<int64_t>(biases.size());
    const at::Tensor whole = all_gather_sequence(part, *g);
    tensor_list outputs;
    for (size_t i = 0; i < values.size(); ++i) {
      outputs.push_back(at::linear(whole, values[i], biases.empty() ? at::Tensor() : biases[i]));
    }
    return outputs;
  }

  // The weights' gradients first, from the part gathered again, which is
  // then dropped; the input's gradient after, summed in place over the
  // outputs: one whole-sequence tensor alive at a time beside the outputs'
  // gradients.
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    Group& g = *saved_pointer<Group>(ctx, "group");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& part = saved[0];
    const std::vector<at::Tensor> into = ctx->saved_data["into"].toTensorVector();
    const std::vector<int64_t> counts = ctx->saved_data["into_counts"].toIntVector();
    const size_t n = saved.size() - 1, biases = static_cast<size_t>(ctx->saved_data["biases"].toInt());
    tensor_list out(1 + n + into.size() + 1 + biases + 1);  // part, values, into, counts, biases, group
    // A bias's slot among the arguments, and among the tensors (needs_input_grad counts tensors only).
    const size_t first_bias = 1 + n + into.size() + 1, first_bias_tensor = 1 + n + into.size();
    const auto rows = [](const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); };
    bool weights_train = false;
    for (size_t i = 0; i < n; ++i) weights_train = weights_train || ctx->needs_input_grad(1 + i);
    for (const at::Tensor& w : into) weights_train = weights_train || w.requires_grad();
    if (weights_train) {
      const at::Tensor whole = rows(all_gather_sequence(part, g));
      auto first_into = into.begin();
      for (size_t i = 0; i < n; ++i) {
        const std::vector<at::Tensor> own(first_into, first_into + counts[i]);
        first_into += counts[i];
        if (!grads[i].defined()) continue;
        if (!own.empty()) {
          add_weight_gradients(own, rows(grads[i]), whole);
        } else if (ctx->needs_input_grad(1 + i)) {
          out[1 + i] = rows(grads[i]).t().mm(whole);
        }
      }
    }
    for (size_t i = 0; i < n && i < biases; ++i) {
      if (grads[i].defined() && ctx->needs_input_grad(first_bias_tensor + i)) out[first_bias + i] = rows(grads[i]).sum(0);
    }
    if (!ctx->needs_input_grad(0)) return out;
    at::Tensor d_whole;  // [tokens, in], then the parts' shape
    for (size_t i = 0; i < n; ++i) {
      if (!grads[i].defined()) continue;  // an output no loss reached
      if (d_whole.defined()) {
        d_whole.addmm_(rows(grads[i]), saved[1 + i]);
      } else {
        d_whole = rows(grads[i]).mm(saved[1 + i]);
      }
    }
    if (!d_whole.defined()) {
      out[0] = at::zeros_like(part);
      return out;
    }
    std::vector<int64_t> shape = part.sizes().vec();
    shape[1] *= g.size();
    out[0] = reduce_scatter_sequence(d_whole.view(shape), g);
    return out;
  }
};

// Column-parallel GEMMs of `x` with `weights` and `biases` (biases: compute
// copies, tp/weight_cast.hpp; empty or one a weight), one output each. Whole
// sequences: x on every rank, its gradient the sum of every rank's partial
// gradient. Split: x is this rank's part; under autocast the parts travel
// in the precision the GEMMs read them in (half the bytes of the fp32
// residual stream), and so does their gradient's sum.
std::vector<at::Tensor> column_linears(const at::Tensor& x, const std::vector<GemmWeight>& weights,
                                       const std::vector<at::Tensor>& biases, Group& tp, TpSequence sequence) {
  if (sequence == TpSequence::kSplit && tp.size() > 1) {
    const c10::DeviceType device = x.device().type();
    const bool autocast = x.scalar_type() == at::kFloat && at::autocast::is_autocast_enabled(device);
    const at::Tensor part = autocast ? x.to(at::autocast::get_lower_precision_fp_from_device_type(device)) : x;
    std::vector<at::Tensor> values, into;
    std::vector<int64_t> into_counts;
    for (const GemmWeight& w : weights) {
      values.push_back(w.value);
      into.insert(into.end(), w.into.begin(), w.into.end());
      into_counts.push_back(static_cast<int64_t>(w.into.size()));
    }
    // As TensorLists: autograd takes a list's tensors as inputs only in that type.
    return GatheredLinears::apply(part, at::TensorList(values), at::TensorList(into), into_counts,
                                  at::TensorList(biases), &tp);
  }
  // One input for every GEMM: autograd sums their gradients into it, then one all-reduce.
  const at::Tensor input = identity_fwd_allreduce_bwd(x, tp);
  std::vector<at::Tensor> outputs;
  for (size_t i = 0; i < weights.size(); ++i) {
    outputs.push_back(gemm_linear(input, weights[i], biases.empty() ? at::Tensor() : biases[i]));
  }
  return outputs;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const LinearSpec& spec, Group& tp, bool gather_output, TpSequence sequence)
    : tp_(tp), gather_output_(gather_output), sequence_(sequence) {
  weight = register_parameter("weight", shard(full_linear_weight(spec), 0, tp.rank(), tp.size()));
  if (spec.bias) bias = register_parameter("bias", shard(full_linear_bias(spec), 0, tp.rank(), tp.size()));
}

at::Tensor ColumnParallelLinear::forward(const at::Tensor& x) {
  std::vector<at::Tensor> biases;
  if (bias.defined()) biases.push_back(compute_weight(bias, x));
  const at::Tensor y = column_linears(x, {gemm_weight(weight, x)}, biases, tp_, sequence_)[0];
  return gather_output_ ? allgather_fwd_split_bwd(y, tp_) : y;
}

std::vector<at::Tensor> fused_column_parallel(const at::Tensor& x, const std::vector<const ColumnParallelLinear*>& layers,
                                              Group& tp) {
  std::vector<at::Tensor> weights, biases;
  std::vector<int64_t> widths;
  for (const ColumnParallelLinear* l : layers) {
    weights.push_back(l->weight);
    widths.push_back(l->weight.size(0));
    if (l->bias.defined()) biases.push_back(l->bias);
  }
  if (!biases.empty() && biases.size() != layers.size()) {
    throw std::logic_error("fused_column_parallel: all layers need a bias, or none");
  }
  const TpSequence sequence = layers.front()->sequence();
  for (const ColumnParallelLinear* l : layers) {
    if (l->sequence() != sequence) throw std::logic_error("fused_column_parallel: the layers' sequence layouts differ");
  }
  if (const std::optional<GemmWeight> fused = fused_gemm_weight(weights, x)) {
    std::vector<at::Tensor> fused_bias;
    if (!biases.empty()) fused_bias.push_back(fused_compute_weight(biases, x));
    return column_linears(x, {*fused}, fused_bias, tp, sequence)[0].split_with_sizes(widths, -1);
  }
  std::vector<GemmWeight> separate;
  std::vector<at::Tensor> compute_biases;
  for (const ColumnParallelLinear* l : layers) {
    separate.push_back(gemm_weight(l->weight, x));
    if (l->bias.defined()) compute_biases.push_back(compute_weight(l->bias, x));
  }
  return column_linears(x, separate, compute_biases, tp, sequence);
}

RowParallelLinear::RowParallelLinear(const LinearSpec& spec, Group& tp, bool input_is_sharded, TpSequence sequence)
    : tp_(tp), input_is_sharded_(input_is_sharded), sequence_(sequence) {
  weight = register_parameter("weight", shard(full_linear_weight(spec), 1, tp.rank(), tp.size()));
  if (spec.bias) bias = register_parameter("bias", full_linear_bias(spec));
}

at::Tensor RowParallelLinear::forward(const at::Tensor& x) {
  at::Tensor local = input_is_sharded_ ? x : split_fwd_allgather_bwd(x, tp_);
  const at::Tensor partial = gemm_linear(local, gemm_weight(weight, local));
  if (sequence_ == TpSequence::kWhole) {
    const at::Tensor y = allreduce_fwd_identity_bwd(partial, tp_);
    return bias.defined() ? y + bias : y;
  }
  const at::Tensor y = sum_scatter_sequence(partial, tp_);
  return bias.defined() ? y + bias : y;
}

}  // namespace hetpar
