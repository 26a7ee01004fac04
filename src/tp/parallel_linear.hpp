// Tensor-parallel linear layers (column- and row-parallel). Weights are [out, in] like
// torch's Linear; each rank holds a shard of the full, layout-independent
// initial weight (model/param_init.hpp).
//
//   ColumnParallelLinear: weight rows (outputs) sharded; input replicated,
//                         output sharded on the last dim (or gathered).
//   RowParallelLinear:    weight columns (inputs) sharded; input sharded on
//                         the last dim, output summed over the TP group.
//
// Under sequence parallelism (TpSequence::kSplit, tp/sequence_split.hpp) the
// activations outside the sharded part hold each rank's 1/tp of the
// sequence: a column-parallel layer all-gathers its input along the sequence
// (its gradient reduce-scattered back), a row-parallel layer reduce-scatters
// its output, and a replicated bias then sees only this rank's tokens: its
// gradient is that part's until the step sums it (tp/partial_grads.hpp).
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "dist/group.hpp"
#include "tp/sequence_split.hpp"

namespace hetpar {

// Where a layer's initial weights come from: the full value of the parameter
// called `name`, then this rank's shard.
struct LinearSpec {
  std::string name;   // e.g. "llm.layers.0.mlp.up_proj"; parameters are name.weight/.bias
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
  uint64_t seed = 0;
  double init_std = 0.02;
};

class ColumnParallelLinear : public torch::nn::Module {
 public:
  ColumnParallelLinear(const LinearSpec& spec, Group& tp, bool gather_output = false,
                       TpSequence sequence = TpSequence::kWhole);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;  // [out/tp, in], [out/tp]
  TpSequence sequence() const { return sequence_; }

 private:
  Group& tp_;
  bool gather_output_;
  TpSequence sequence_;
};

class RowParallelLinear : public torch::nn::Module {
 public:
  RowParallelLinear(const LinearSpec& spec, Group& tp, bool input_is_sharded = true,
                    TpSequence sequence = TpSequence::kWhole);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;  // [out, in/tp], [out] (added once, after the sum)
  // The output is this rank's part of the sequence: so is the bias's
  // gradient, summed over the group once a step (tp/partial_grads.hpp).
  bool sees_part_of_sequence() const { return sequence_ == TpSequence::kSplit && tp_.size() > 1; }

 private:
  Group& tp_;
  bool input_is_sharded_;
  TpSequence sequence_;
};

// Column-parallel layers that read the same input (q/k/v, gate/up), the
// input's gradient all-reduced once instead of once per layer. Under bf16
// autocast they run as one GEMM on the step's concatenated bf16 copy of their
// weights (tp/weight_cast.hpp); in fp32 as separate GEMMs on the fp32 weights
// themselves (a concatenation would copy them every forward). Returns each
// layer's output, in order. The layers keep their own parameters, so
// initialisation, checkpoints and sharding do not change. Under sequence
// parallelism (the layers' TpSequence, all alike) the input is gathered once.
std::vector<at::Tensor> fused_column_parallel(const at::Tensor& x, const std::vector<const ColumnParallelLinear*>& layers,
                                              Group& tp);

// The full initial weight and bias of a layer, as every layout derives them.
at::Tensor full_linear_weight(const LinearSpec& spec);
at::Tensor full_linear_bias(const LinearSpec& spec);

}  // namespace hetpar
