#include "model/mlp.hpp"

#include <ATen/ATen.h>

namespace hetpar {
namespace {

LinearSpec linear(const MlpSpec& s, const char* name, int64_t in, int64_t out, bool bias) {
  LinearSpec l;
  l.name = s.name + "." + name;
  l.in = in;
  l.out = out;
  l.bias = bias;
  l.seed = s.seed;
  l.init_std = s.init_std;
  return l;
}

}  // namespace

GeluMlp::GeluMlp(const MlpSpec& s, Group& tp, const char* fc1, const char* fc2, int64_t out)
    : approximate_(s.activation == "gelu" ? "none" : "tanh") {
  if (s.activation != "gelu" && s.activation != "gelu_pytorch_tanh") {
    throw std::invalid_argument(s.name + ": unknown activation " + s.activation);
  }
  fc1_ = register_module(fc1, std::make_shared<ColumnParallelLinear>(linear(s, fc1, s.hidden, s.ffn_hidden, true), tp,
                                                                     /*gather_output=*/false, s.sequence));
  fc2_ = register_module(fc2, std::make_shared<RowParallelLinear>(linear(s, fc2, s.ffn_hidden, out ? out : s.hidden, true),
                                                                  tp, /*input_is_sharded=*/true, s.sequence));
}

SwiGluMlp::SwiGluMlp(const MlpSpec& s, Group& tp) : tp_(tp) {
  const auto column = [&](const char* name) {
    return std::make_shared<ColumnParallelLinear>(linear(s, name, s.hidden, s.ffn_hidden, false), tp,
                                                  /*gather_output=*/false, s.sequence);
  };
  gate_ = register_module("gate_proj", column("gate_proj"));
  up_ = register_module("up_proj", column("up_proj"));
  down_ = register_module("down_proj", std::make_shared<RowParallelLinear>(
                                           linear(s, "down_proj", s.ffn_hidden, s.hidden, false), tp,
                                           /*input_is_sharded=*/true, s.sequence));
}

at::Tensor SwiGluMlp::forward(const at::Tensor& x) {
  const std::vector<at::Tensor> gate_up = fused_column_parallel(x, {gate_.get(), up_.get()}, tp_);
  return down_->forward(at::silu(gate_up[0]) * gate_up[1]);
}

}  // namespace hetpar
