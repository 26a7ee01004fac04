#include "tp/parallel_linear.hpp"

#include <ATen/ATen.h>

#include "model/param_init.hpp"
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

ColumnParallelLinear::ColumnParallelLinear(const LinearSpec& spec, Group& tp, bool gather_output)
    : tp_(tp), gather_output_(gather_output) {
  weight = register_parameter("weight", shard(full_linear_weight(spec), 0, tp.rank(), tp.size()));
  if (spec.bias) bias = register_parameter("bias", shard(full_linear_bias(spec), 0, tp.rank(), tp.size()));
}

at::Tensor ColumnParallelLinear::forward(const at::Tensor& x) {
  at::Tensor y = at::linear(identity_fwd_allreduce_bwd(x, tp_), compute_weight(weight, x), compute_weight(bias, x));
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
  // One input for every projection: autograd sums their gradients into it, then one all-reduce.
  const at::Tensor input = identity_fwd_allreduce_bwd(x, tp);
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

RowParallelLinear::RowParallelLinear(const LinearSpec& spec, Group& tp, bool input_is_sharded)
    : tp_(tp), input_is_sharded_(input_is_sharded) {
  weight = register_parameter("weight", shard(full_linear_weight(spec), 1, tp.rank(), tp.size()));
  if (spec.bias) bias = register_parameter("bias", full_linear_bias(spec));
}

at::Tensor RowParallelLinear::forward(const at::Tensor& x) {
  at::Tensor local = input_is_sharded_ ? x : split_fwd_allgather_bwd(x, tp_);
  at::Tensor y = allreduce_fwd_identity_bwd(at::linear(local, compute_weight(weight, local)), tp_);
  return bias.defined() ? y + bias : y;
}

}  // namespace hetpar
