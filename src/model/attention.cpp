#include "model/attention.hpp"

#include <ATen/ATen.h>

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

// The half-rotation convention: pairs (i, i + d/2) rotate together.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> rope_tables(int64_t seq, int64_t head_dim, double theta) {
  const at::Tensor inv_freq =
      1.0 / at::pow(theta, at::arange(0, head_dim, 2, at::kDouble) / static_cast<double>(head_dim));
  const at::Tensor angles = at::outer(at::arange(seq, at::kDouble), inv_freq);
  const at::Tensor both = at::cat({angles, angles}, -1);
  return {both.cos().to(at::kFloat), both.sin().to(at::kFloat)};
}

ParallelAttention::ParallelAttention(const AttentionSpec& s, Group& tp)
    : local_heads_(s.heads / tp.size()), local_kv_heads_(s.kv_heads / tp.size()),
      head_dim_(s.hidden / s.heads), causal_(s.causal) {
  q_ = register_module("q_proj", std::make_shared<ColumnParallelLinear>(projection(s, "q_proj", s.hidden), tp));
  k_ = register_module("k_proj", std::make_shared<ColumnParallelLinear>(
                                     projection(s, "k_proj", s.kv_heads * head_dim_), tp));
  v_ = register_module("v_proj", std::make_shared<ColumnParallelLinear>(
                                     projection(s, "v_proj", s.kv_heads * head_dim_), tp));
  LinearSpec out = projection(s, s.out_name, s.hidden);
  out_ = register_module(s.out_name, std::make_shared<RowParallelLinear>(out, tp));
}

at::Tensor ParallelAttention::forward(const at::Tensor& x, const at::Tensor& rope_cos, const at::Tensor& rope_sin) {
  const int64_t b = x.size(0), s = x.size(1);
  // [B, S, heads*d] -> [B, heads, S, d]
  auto split_heads = [&](const at::Tensor& t, int64_t heads) { return t.view({b, s, heads, head_dim_}).transpose(1, 2); };
  at::Tensor q = split_heads(q_->forward(x), local_heads_);
  at::Tensor k = split_heads(k_->forward(x), local_kv_heads_);
  at::Tensor v = split_heads(v_->forward(x), local_kv_heads_);
  if (rope_cos.defined()) {
    q = q * rope_cos + rotate_half(q) * rope_sin;
    k = k * rope_cos + rotate_half(k) * rope_sin;
  }
  if (local_kv_heads_ != local_heads_) {  // GQA: each kv head serves a run of query heads
    k = k.repeat_interleave(local_heads_ / local_kv_heads_, 1);
    v = v.repeat_interleave(local_heads_ / local_kv_heads_, 1);
  }
  at::Tensor o = at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal_);
  return out_->forward(o.transpose(1, 2).reshape({b, s, local_heads_ * head_dim_}));
}

}  // namespace hetpar
