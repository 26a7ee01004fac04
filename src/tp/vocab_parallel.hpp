// Vocabulary-parallel embedding and cross-entropy: each TP rank holds rows
// [rank*V/tp, (rank+1)*V/tp) of the embedding and of the LM head's logits, so
// neither the table nor the full logits ever exist on one rank.
#pragma once

#include <torch/nn/module.h>

#include <string>

#include "dist/group.hpp"
#include "tp/sequence_split.hpp"

namespace hetpar {

class VocabParallelEmbedding : public torch::nn::Module {
 public:
  // Full table: init_normal(seed, name + ".weight", {vocab, hidden}, std).
  // `output`: kSplit gives each rank its part of the sequence (sequence parallelism).
  VocabParallelEmbedding(const std::string& name, int64_t vocab, int64_t hidden, uint64_t seed,
                         double init_std, Group& tp, TpSequence output = TpSequence::kWhole);
  // ids: any shape, int64 -> [..., hidden]; split: ids [B, S] -> this rank's [B, S/tp, hidden].
  at::Tensor forward(const at::Tensor& ids);
  at::Tensor weight;  // [vocab/tp, hidden]

 private:
  Group& tp_;
  int64_t first_, count_;
  TpSequence output_;
};

// Per-token cross-entropy from vocab-sharded logits [N, V/tp] and full-vocab
// targets [N] (int64). Returns [N] losses; targets < 0 give 0 loss and no
// gradient (the caller divides by its own count of target tokens).
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& targets, Group& tp);

// The cross-entropy summed over tokens, in fp32 whatever the logits' precision
// (the softmax's sums are where bf16 loses most): logits [N, V/tp], targets
// [N], negative targets ignored. Over a TP group, the vocab-parallel function;
// on one rank, the library's fused log-softmax and NLL, which pass over the
// logits fewer times (bench/bench_step_ops.cpp times the two side by side).
at::Tensor cross_entropy_sum(const at::Tensor& local_logits, const at::Tensor& targets, Group& tp);

}  // namespace hetpar
