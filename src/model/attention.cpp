#include "model/attention.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

#include "model/context_attention.hpp"
#include "model/rope.hpp"

namespace hetpar {
namespace {

LinearSpec projection(const AttentionSpec& s, const std::string& name, int64_t out) {
  LinearSpec l;
  l.name = s.name + "." + name;
  l.in = s.hidden;
  l.out = out;
  l.bias = s.bias;
  l.seed = s.seed;
  l.init_std = s.init_std;
  return l;
}

}  // namespace

ParallelAttention::ParallelAttention(const AttentionSpec& s, Group& tp, Group* cp)
    : tp_(tp), cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr), local_heads_(s.heads / tp.size()), local_kv_heads_(s.kv_heads / tp.size()),
      head_dim_(s.hidden / s.heads), causal_(s.causal) {
  if (cp_ != nullptr && !causal_) throw std::invalid_argument(s.name + ": context parallelism needs causal attention");
  const auto column = [&](const char* name, int64_t out) {
    return std::make_shared<ColumnParallelLinear>(projection(s, name, out), tp, /*gather_output=*/false, s.sequence);
  };
  q_ = register_module("q_proj", column("q_proj", s.hidden));
  k_ = register_module("k_proj", column("k_proj", s.kv_heads * head_dim_));
  v_ = register_module("v_proj", column("v_proj", s.kv_heads * head_dim_));
  out_ = register_module(s.out_name, std::make_shared<RowParallelLinear>(projection(s, s.out_name, s.hidden), tp,
                                                                         /*input_is_sharded=*/true, s.sequence));
}

at::Tensor ParallelAttention::forward(const at::Tensor& x, const at::Tensor& rope_cos, const at::Tensor& rope_sin) {
  // One GEMM for q, k and v; [B, S, heads*d] -> [B, heads, S, d] views
  // (S the whole sequence also when x holds this rank's part of it).
  const std::vector<at::Tensor> qkv = fused_column_parallel(x, {q_.get(), k_.get(), v_.get()}, tp_);
  const int64_t b = qkv[0].size(0), s = qkv[0].size(1);
  auto split_heads = [&](const at::Tensor& t, int64_t heads) { return t.view({b, s, heads, head_dim_}).transpose(1, 2); };
  at::Tensor q = split_heads(qkv[0], local_heads_);
  at::Tensor k = split_heads(qkv[1], local_kv_heads_);
  // With RoPE the attention saves rotated copies of q and k: V then goes on
  // its own (a copy where q, k and v came from one GEMM), for a view would
  // keep the whole projection, the unrotated queries and keys with it, alive
  // until the backward.
  const at::Tensor v = split_heads(rope_cos.defined() ? qkv[2].contiguous() : qkv[2], local_kv_heads_);
  if (rope_cos.defined()) {
    q = apply_rope(q, rope_cos, rope_sin);
    k = apply_rope(k, rope_cos, rope_sin);
  }
  // Grouped-query attention natively: each kv head serves a run of query heads, no copies of K and V.
  const at::Tensor o = cp_ != nullptr ? context_parallel_attention(q, k, v, *cp_)
                                      : at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal_, std::nullopt,
                                                                         /*enable_gqa=*/local_kv_heads_ != local_heads_);
  return out_->forward(o.transpose(1, 2).reshape({b, s, local_heads_ * head_dim_}));
}

bool grouped_query_attention_keeps_probabilities(const at::Device& device) {
  const auto options = at::TensorOptions(device.is_cuda() ? at::kBFloat16 : at::kFloat).device(device);
  const at::Tensor q = at::zeros({1, 8, 128, 64}, options), kv = at::zeros({1, 2, 128, 64}, options);
  constexpr int64_t kMathKernel = 0;  // the library's SDPBackend::math
  return at::_fused_sdp_choice(q, kv, kv, {}, 0.0, true, std::nullopt, /*enable_gqa=*/true) == kMathKernel;
}

}  // namespace hetpar
