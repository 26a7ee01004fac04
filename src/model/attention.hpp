// Multi-head attention with heads sharded over the TP group: q/k/v are
// column-parallel (each rank computes heads/tp query heads and kv_heads/tp
// key/value heads, all three in one GEMM), the output projection is
// row-parallel. Grouped-query
// attention when kv_heads < heads; rotary embeddings for the LLM. Given a
// context-parallel group of more than one rank (causal attention only), x
// holds this rank's chunks of the sequence (model/context_attention.hpp).
// Under sequence parallelism x and the output hold this TP rank's 1/tp of
// that (tp/parallel_linear.hpp); the attention itself sees all of it.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>

#include "dist/group.hpp"
#include "model/rope.hpp"
#include "tp/parallel_linear.hpp"

namespace hetpar {

struct AttentionSpec {
  std::string name;       // parameter prefix, e.g. "llm.layers.3.self_attn"
  std::string out_name;   // name of the output projection ("o_proj", "out_proj")
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  bool causal = false;
  bool bias = false;
  uint64_t seed = 0;
  double init_std = 0.02;
  TpSequence sequence = TpSequence::kWhole;
};

class ParallelAttention : public torch::nn::Module {
 public:
  ParallelAttention(const AttentionSpec& spec, Group& tp, Group* cp = nullptr);
  // x: [B, S, hidden] ([B, S/tp, hidden] split); rope: [S, head_dim / 2] cos
  // and sin (rope_tables) of the whole S's positions, or undefined for none.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& rope_cos, const at::Tensor& rope_sin);

 private:
  std::shared_ptr<ColumnParallelLinear> q_, k_, v_;
  std::shared_ptr<RowParallelLinear> out_;
  Group& tp_;
  Group* cp_;  // null or one rank: the whole sequence is here
  int64_t local_heads_, local_kv_heads_, head_dim_;
  bool causal_;
};

// Whether the library's scaled-dot-product attention takes its unfused
// kernel for grouped-query heads on `device`, which keeps every query's
// probabilities for the backward (the memory model counts them then). The
// library's own choice for a small causal case; LibTorch 2.11 and 2.15 take a
// fused kernel on the CPU too.
bool grouped_query_attention_keeps_probabilities(const at::Device& device);

}  // namespace hetpar
