#include "model/llama.hpp"

#include <ATen/ATen.h>

#include "model/context_attention.hpp"
#include "model/recompute.hpp"
#include "model/residual.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "util/host_to_device.hpp"

namespace hetpar {
LlamaBlock::LlamaBlock(const LlmConfig& c, const std::string& name, uint64_t seed, Group& tp, Group* cp,
                       TpSequence sequence) {
  const bool split = sequence == TpSequence::kSplit;
  input_norm_ = register_module("input_layernorm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps, split));
  AttentionSpec a;
  a.name = name + ".self_attn";
  a.out_name = "o_proj";
  a.hidden = c.hidden;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.causal = true;
  a.seed = seed;
  a.sequence = sequence;
  attn_ = register_module("self_attn", std::make_shared<ParallelAttention>(a, tp, cp));
  post_attention_norm_ =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps, split));
  MlpSpec m{name + ".mlp", c.hidden, c.ffn_hidden, seed, 0.02};
  m.sequence = sequence;
  mlp_ = register_module("mlp", std::make_shared<SwiGluMlp>(m, tp));
}

at::Tensor LlamaBlock::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor h = residual_add(x, attn_->forward(input_norm_->forward(x), cos, sin));
  return residual_add(h, mlp_->forward(post_attention_norm_->forward(h)));
}

LlamaModel::LlamaModel(const LlmConfig& c, uint64_t seed, Group& tp, Group* cp, int stage, int stages,
                       TpSequence sequence)
    : config_(c),
      tp_(tp),
      cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr),
      sequence_(tp.size() > 1 ? sequence : TpSequence::kWhole) {
  if (stage == 0) {
    embed_ = register_module("embed_tokens", std::make_shared<VocabParallelEmbedding>(
                                                 "llm.embed_tokens", c.vocab_size, c.hidden, seed, 0.02, tp, sequence_));
  }
  auto layers = register_module("layers", std::make_shared<torch::nn::Module>());
  const StageLayers mine = stage_layers(c.layers, stages, stage);
  for (int64_t i = mine.first; i < mine.first + mine.count; ++i) {
    const std::string name = "llm.layers." + std::to_string(i);
    blocks_.push_back(
        layers->register_module(std::to_string(i), std::make_shared<LlamaBlock>(c, name, seed, tp, cp_, sequence_)));
  }
  // Buffers, so that moving the model to its device moves them too.
  auto [cos, sin] = rope_tables(c.seq_len, c.hidden / c.heads, c.rope_theta);
  rope_cos_ = register_buffer("rope_cos", cos);
  rope_sin_ = register_buffer("rope_sin", sin);
  if (stage != stages - 1) return;
  norm_ = register_module("norm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps, sequence_ == TpSequence::kSplit));
  LinearSpec head;
  head.name = "llm.lm_head";
  head.in = c.hidden;
  head.out = c.vocab_size;
  head.bias = false;
  head.seed = seed;
  lm_head_ = register_module("lm_head", std::make_shared<ColumnParallelLinear>(head, tp, /*gather_output=*/false, sequence_));
}

at::Tensor LlamaModel::forward(const at::Tensor& ids, const at::Tensor& image_rows, const at::Tensor& image_mask) {
  return head(blocks(embed(ids, image_rows, image_mask)));
}

at::Tensor LlamaModel::embed(const at::Tensor& ids, const at::Tensor& image_rows, const at::Tensor& image_mask) {
  at::Tensor x = embed_->forward(ids).to(residual_dtype_);
  // Splice even zero rows: the boundary's backward must run on every rank,
  // also on one whose samples hold no image in this micro-batch.
  if (!image_rows.defined()) return x;
  // Split over TP: this rank's part of the sequence, its rows.
  const at::Tensor mask = sequence_ == TpSequence::kSplit ? image_mask.narrow(1, tp_.rank() * x.size(1), x.size(1)) : image_mask;
  // Positions from a nonzero of known size (the rows' count), then an indexed
  // copy: no host sync, where masked_scatter's backward (a masked_select)
  // waits for the device to count the mask.
  const at::Tensor positions = at::nonzero_static(mask.flatten(), image_rows.size(0)).squeeze(1);
  return x.reshape({-1, x.size(-1)}).index_copy(0, positions, image_rows.to(x.scalar_type())).view(x.sizes());
}

at::Tensor LlamaModel::blocks(const at::Tensor& input) {
  // RoPE turns the queries and keys of the whole part, gathered also where the input is split.
  const int64_t s = input.size(1) * (sequence_ == TpSequence::kSplit ? tp_.size() : 1);
  at::Tensor cos = rope_cos_.narrow(0, 0, s), sin = rope_sin_.narrow(0, 0, s);
  if (cp_ != nullptr) {
    const at::Tensor positions = host_to_device(cp_positions(s * cp_->size(), cp_->rank(), cp_->size()), rope_cos_.device());
    cos = rope_cos_.index_select(0, positions);
    sin = rope_sin_.index_select(0, positions);
  }
  at::Tensor x = input;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const std::shared_ptr<LlamaBlock>& block = blocks_[i];
    if (int64_t(i) >= recompute_layers_) {
      x = block->forward(x, cos, sin);
      continue;
    }
    x = recompute_in_backward(*block, [block, cos, sin](const at::Tensor& in) { return block->forward(in, cos, sin); }, x);
  }
  return x;
}

at::Tensor LlamaModel::head(const at::Tensor& x) { return lm_head_->forward(norm_->forward(x)); }

at::Tensor LlamaModel::loss_sum(const at::Tensor& logits, const at::Tensor& targets) {
  return cross_entropy_sum(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), tp_);
}

}  // namespace hetpar
