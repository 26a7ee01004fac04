// Feed-forward blocks, tensor-parallel: the widening projections are
// column-parallel, the narrowing one row-parallel (one all-reduce per block;
// under sequence parallelism an all-gather of the input and a reduce-scatter
// of the output: tp/parallel_linear.hpp).
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "tp/parallel_linear.hpp"

namespace hetpar {

struct MlpSpec {
  std::string name;  // parameter prefix, e.g. "llm.layers.0.mlp"
  int64_t hidden = 0;
  int64_t ffn_hidden = 0;
  uint64_t seed = 0;
  double init_std = 0.02;
  std::string activation = "gelu_pytorch_tanh";  // GeluMlp: gelu_pytorch_tanh or gelu (exact erf)
  TpSequence sequence = TpSequence::kWhole;
};

// fc2(gelu(fc1(x))), with biases, gelu exact or in its tanh form: the ViT
// block's MLP and the projector.
class GeluMlp : public torch::nn::Module {
 public:
  GeluMlp(const MlpSpec& spec, Group& tp, const char* fc1 = "fc1", const char* fc2 = "fc2", int64_t out = 0);
  at::Tensor forward(const at::Tensor& x) { return fc2_->forward(at::gelu(fc1_->forward(x), approximate_)); }

 private:
  std::string approximate_;  // at::gelu's "tanh" or "none"
  std::shared_ptr<ColumnParallelLinear> fc1_;
  std::shared_ptr<RowParallelLinear> fc2_;
};

// down(silu(gate(x)) * up(x)), no biases: the Llama MLP; gate and up in one GEMM.
class SwiGluMlp : public torch::nn::Module {
 public:
  SwiGluMlp(const MlpSpec& spec, Group& tp);
  at::Tensor forward(const at::Tensor& x);

 private:
  Group& tp_;
  std::shared_ptr<ColumnParallelLinear> gate_, up_;
  std::shared_ptr<RowParallelLinear> down_;
};

}  // namespace hetpar
