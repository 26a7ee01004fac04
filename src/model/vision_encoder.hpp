// The vision encoder, SigLIP style: patch embedding (a linear map of each
// flattened C x p x p patch, i.e. a stride-p convolution), learned positions,
// pre-LN blocks with bidirectional attention and a GELU MLP. The features are
// the last block's output, as multimodal LLMs take them (no final LayerNorm:
// LLaVA reads the tower's hidden states, which precede it), less the first
// token where `drop_first_token` says so. Heads and MLP are sharded over the
// encoder's TP group.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "config/run_config.hpp"
#include "model/attention.hpp"
#include "model/mlp.hpp"
#include "model/norms.hpp"

namespace hetpar {

class VitBlock : public torch::nn::Module {
 public:
  VitBlock(const EncoderConfig& c, const std::string& name, uint64_t seed, Group& tp);
  at::Tensor forward(const at::Tensor& x);

 private:
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<ParallelAttention> attn_;
  std::shared_ptr<GeluMlp> mlp_;
};

class VisionEncoder : public torch::nn::Module {
 public:
  // Under pipeline parallelism, stage `stage` of `stages` holds its layers
  // (parallel/pipeline_schedule.hpp, named by their global index) and the
  // first stage the patch and position embeddings.
  VisionEncoder(const EncoderConfig& c, uint64_t seed, Group& tp, int stage = 0, int stages = 1);
  // pixels [N, C, H, W] -> [N, tokens_per_image, hidden] (the whole encoder on this rank)
  at::Tensor forward(const at::Tensor& pixels);
  // The pieces a pipeline stage runs: pixels -> [N, patches, hidden] (first
  // stage); this stage's blocks; the features the projector takes (last stage).
  at::Tensor embed(const at::Tensor& pixels);
  at::Tensor blocks(const at::Tensor& x);
  at::Tensor features(const at::Tensor& x) const;
  bool first_stage() const { return patch_weight.defined(); }
  const EncoderConfig& config() const { return config_; }
  // This stage's first `layers` blocks keep only their input and run again
  // in the backward (model/recompute.hpp); 0: none.
  void set_recompute(int64_t layers) { recompute_layers_ = layers; }
  // The residual stream's type: the patch and position embeddings are cast
  // to it, and every layer's sums and norms then keep it (fp32 unless set).
  void set_residual_dtype(at::ScalarType dtype) { residual_dtype_ = dtype; }
  int64_t block_count() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  EncoderConfig config_;
  int64_t recompute_layers_ = 0;
  at::ScalarType residual_dtype_ = at::kFloat;
  at::Tensor patch_weight, patch_bias, position_embedding;  // first stage only
  std::vector<std::shared_ptr<VitBlock>> blocks_;
};

// Encoder hidden -> LLM hidden: linear_2(act(linear_1(x))), on the encoder's TP group.
std::shared_ptr<GeluMlp> make_projector(const EncoderConfig& encoder, const LlmConfig& llm, uint64_t seed, Group& tp);

// [N, C, H, W] -> [N, (H/p)(W/p), C*p*p], patches in row-major order.
at::Tensor patchify(const at::Tensor& pixels, int64_t patch);

}  // namespace hetpar
