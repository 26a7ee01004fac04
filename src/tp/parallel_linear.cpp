#include "tp/parallel_linear.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "model/param_init.hpp"
#include "tp/sequence_split.hpp"
#include "tp/tp_comm_ops.hpp"
#include "tp/weight_cast.hpp"

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

// A column-parallel layer's input as every rank needs it: the whole sequence.
// Replicated, its gradient is the sum of every rank's partial gradient; split,
// each rank's part of that sum. Split under autocast, the parts travel in the
// precision the GEMM reads them in (half the bytes of the fp32 residual
// stream), and so does their gradient's sum.
at::Tensor column_input(const at::Tensor& x, Group& tp, TpSequence sequence) {
  if (sequence == TpSequence::kWhole) return identity_fwd_allreduce_bwd(x, tp);
  const c10::DeviceType device = x.device().type();
  if (x.scalar_type() == at::kFloat && at::autocast::is_autocast_enabled(device)) {
    return gather_sequence(x.to(at::autocast::get_lower_precision_fp_from_device_type(device)), tp);
  }
  return gather_sequence(x, tp);
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const LinearSpec& spec, Group& tp, bool gather_output, TpSequence sequence)
    : tp_(tp), gather_output_(gather_output), sequence_(sequence) {
  weight = register_parameter("weight", shard(full_linear_weight(spec), 0, tp.rank(), tp.size()));
  if (spec.bias) bias = register_parameter("bias", shard(full_linear_bias(spec), 0, tp.rank(), tp.size()));
}

at::Tensor ColumnParallelLinear::forward(const at::Tensor& x) {
  at::Tensor y = at::linear(column_input(x, tp_, sequence_), compute_weight(weight, x), compute_weight(bias, x));
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
  // One input for every projection: autograd sums their gradients into it, then one collective.
  const at::Tensor input = column_input(x, tp, sequence);
  if (const at::Tensor fused = fused_compute_weight(weights, x); fused.defined()) {
    const at::Tensor bias = biases.empty() ? at::Tensor() : fused_compute_weight(biases, x);
    return at::linear(input, fused, bias).split_with_sizes(widths, -1);
  }
  std::vector<at::Tensor> outputs;
  for (const ColumnParallelLinear* l : layers) {
    outputs.push_back(at::linear(input, compute_weight(l->weight, x), compute_weight(l->bias, x)));
  }
  return outputs;
}

RowParallelLinear::RowParallelLinear(const LinearSpec& spec, Group& tp, bool input_is_sharded, TpSequence sequence)
    : tp_(tp), input_is_sharded_(input_is_sharded), sequence_(sequence) {
  weight = register_parameter("weight", shard(full_linear_weight(spec), 1, tp.rank(), tp.size()));
  if (spec.bias) bias = register_parameter("bias", full_linear_bias(spec));
}

at::Tensor RowParallelLinear::forward(const at::Tensor& x) {
  at::Tensor local = input_is_sharded_ ? x : split_fwd_allgather_bwd(x, tp_);
  const at::Tensor partial = at::linear(local, compute_weight(weight, local));
  if (sequence_ == TpSequence::kWhole) {
    const at::Tensor y = allreduce_fwd_identity_bwd(partial, tp_);
    return bias.defined() ? y + bias : y;
  }
  const at::Tensor y = sum_scatter_sequence(partial, tp_);
  return bias.defined() ? y + identity_fwd_allreduce_bwd(bias, tp_) : y;
}

}  // namespace hetpar
