// The LLM, Llama style: vocab-parallel embedding, pre-RMSNorm blocks with
// RoPE + grouped-query causal attention and a SwiGLU MLP, final RMSNorm and
// an untied, vocab-parallel LM head. Image embeddings replace the embeddings
// of placeholder tokens before the first block. Given a context-parallel
// group of more than one rank, the model runs on this rank's chunks of each
// sequence (model/context_attention.hpp): ids, image rows and logits are the
// local part, RoPE angles come from the global positions. Under sequence
// parallelism (TpSequence::kSplit, tp/sequence_split.hpp) each TP rank holds
// a contiguous 1/tp of that part from the embedding to the final norm: the
// embedding reduce-scatters, each layer all-gathers before its column-
// parallel projections and reduce-scatters after its row-parallel ones, and
// the head gathers the whole part again for the logits.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "config/run_config.hpp"
#include "model/attention.hpp"
#include "model/mlp.hpp"
#include "model/norms.hpp"
#include "tp/vocab_parallel.hpp"

namespace hetpar {

class LlamaBlock : public torch::nn::Module {
 public:
  LlamaBlock(const LlmConfig& c, const std::string& name, uint64_t seed, Group& tp, Group* cp,
             TpSequence sequence = TpSequence::kWhole);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  std::shared_ptr<RMSNorm> input_norm_, post_attention_norm_;
  std::shared_ptr<ParallelAttention> attn_;
  std::shared_ptr<SwiGluMlp> mlp_;
};

class LlamaModel : public torch::nn::Module {
 public:
  // Under pipeline parallelism, stage `stage` of `stages` holds its layers
  // (parallel/pipeline_schedule.hpp, named by their global index), the
  // embedding on the first stage, the final norm and head on the last.
  LlamaModel(const LlmConfig& c, uint64_t seed, Group& tp, Group* cp = nullptr, int stage = 0, int stages = 1,
             TpSequence sequence = TpSequence::kWhole);
  // ids [B, S] (int64); image_rows [K, hidden] fill, in row-major order, the
  // K positions where image_mask [B, S] is true (both undefined: text only).
  // Returns this rank's vocab shard of the logits, [B, S, vocab/tp]. Under
  // CP, S is this rank's part (cp_positions of a sequence cp times as long).
  // Split over TP, image_rows are only those at this rank's part of S (its
  // 1/tp, sequence_positions), in the same order.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& image_rows, const at::Tensor& image_mask);
  // The pieces a pipeline stage runs: embedding with image rows spliced in
  // (first stage), this stage's blocks over activations [B, S, hidden] (split:
  // [B, S/tp, hidden]), and the final norm and head (last stage).
  at::Tensor embed(const at::Tensor& ids, const at::Tensor& image_rows, const at::Tensor& image_mask);
  at::Tensor blocks(const at::Tensor& x);
  at::Tensor head(const at::Tensor& x);
  bool first_stage() const { return embed_ != nullptr; }
  bool last_stage() const { return lm_head_ != nullptr; }
  // Sum over tokens of the cross-entropy of `logits` against `targets` [B, S]
  // (negative targets are ignored).
  at::Tensor loss_sum(const at::Tensor& logits, const at::Tensor& targets);
  int64_t hidden() const { return config_.hidden; }
  // This stage's first `layers` blocks keep only their input and run again
  // in the backward (model/recompute.hpp); 0: none.
  void set_recompute(int64_t layers) { recompute_layers_ = layers; }
  // The residual stream's type: the embeddings are cast to it, and every
  // layer's sums and norms then keep it (fp32 unless set).
  void set_residual_dtype(at::ScalarType dtype) { residual_dtype_ = dtype; }
  int64_t block_count() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  LlmConfig config_;
  int64_t recompute_layers_ = 0;
  at::ScalarType residual_dtype_ = at::kFloat;
  Group& tp_;
  Group* cp_;  // null or one rank: whole sequences
  TpSequence sequence_;  // kSplit only over more than one TP rank
  std::shared_ptr<VocabParallelEmbedding> embed_;
  std::vector<std::shared_ptr<LlamaBlock>> blocks_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<ColumnParallelLinear> lm_head_;
  at::Tensor rope_cos_, rope_sin_;
};

}  // namespace hetpar
