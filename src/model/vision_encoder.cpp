#include "model/vision_encoder.hpp"

#include <ATen/ATen.h>

#include "model/param_init.hpp"
#include "model/recompute.hpp"
#include "model/residual.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "tp/weight_cast.hpp"
#include "tp/weight_grad.hpp"

namespace hetpar {

at::Tensor patchify(const at::Tensor& pixels, int64_t p) {
  const int64_t n = pixels.size(0), c = pixels.size(1), gh = pixels.size(2) / p, gw = pixels.size(3) / p;
  return pixels.reshape({n, c, gh, p, gw, p}).permute({0, 2, 4, 1, 3, 5}).reshape({n, gh * gw, c * p * p});
}

VitBlock::VitBlock(const EncoderConfig& c, const std::string& name, uint64_t seed, Group& tp) {
  ln1_ = register_module("layer_norm1", std::make_shared<LayerNorm>(c.hidden, c.norm_eps));
  AttentionSpec a;
  a.name = name + ".self_attn";
  a.out_name = "out_proj";
  a.hidden = c.hidden;
  a.heads = a.kv_heads = c.heads;
  a.bias = true;
  a.seed = seed;
  attn_ = register_module("self_attn", std::make_shared<ParallelAttention>(a, tp));
  ln2_ = register_module("layer_norm2", std::make_shared<LayerNorm>(c.hidden, c.norm_eps));
  MlpSpec m{name + ".mlp", c.hidden, c.mlp_hidden, seed, 0.02, c.hidden_act};
  mlp_ = register_module("mlp", std::make_shared<GeluMlp>(m, tp));
}

at::Tensor VitBlock::forward(const at::Tensor& x) {
  const at::Tensor h = residual_add(x, attn_->forward(ln1_->forward(x), {}, {}));
  return residual_add(h, mlp_->forward(ln2_->forward(h)));
}

VisionEncoder::VisionEncoder(const EncoderConfig& c, uint64_t seed, Group& tp, int stage, int stages) : config_(c) {
  const int64_t patch_in = c.channels * c.patch_size * c.patch_size;
  if (stage == 0) {
    // Holders named as in common checkpoints: patch_embedding.weight, ...
    auto patch = register_module("patch_embedding", std::make_shared<torch::nn::Module>());
    patch_weight = patch->register_parameter(
        "weight", init_normal(seed, "vision.patch_embedding.weight", {c.hidden, patch_in}, 0.02));
    patch_bias = patch->register_parameter("bias", at::zeros({c.hidden}));
    auto position = register_module("position_embedding", std::make_shared<torch::nn::Module>());
    position_embedding = position->register_parameter(
        "weight", init_normal(seed, "vision.position_embedding.weight", {c.patches_per_image(), c.hidden}, 0.02));
  }
  auto layers = register_module("layers", std::make_shared<torch::nn::Module>());
  const StageLayers mine = stage_layers(c.layers, stages, stage);
  for (int64_t i = mine.first; i < mine.first + mine.count; ++i) {
    const std::string name = "vision.layers." + std::to_string(i);
    blocks_.push_back(layers->register_module(std::to_string(i), std::make_shared<VitBlock>(c, name, seed, tp)));
  }
}

at::Tensor VisionEncoder::forward(const at::Tensor& pixels) { return features(blocks(embed(pixels))); }

at::Tensor VisionEncoder::embed(const at::Tensor& pixels) {
  const at::Tensor patches = patchify(pixels, config_.patch_size);
  const at::Tensor x = gemm_linear(patches, gemm_weight(patch_weight, patches), compute_weight(patch_bias, patches));
  return (x + position_embedding).to(residual_dtype_);
}

at::Tensor VisionEncoder::blocks(const at::Tensor& input) {
  at::Tensor x = input;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const std::shared_ptr<VitBlock>& block = blocks_[i];
    if (int64_t(i) >= recompute_layers_) {
      x = block->forward(x);
      continue;
    }
    x = recompute_in_backward(*block, [block](const at::Tensor& in) { return block->forward(in); }, x);
  }
  return x;
}

at::Tensor VisionEncoder::features(const at::Tensor& x) const {
  return config_.drop_first_token ? x.narrow(1, 1, x.size(1) - 1) : x;
}

std::shared_ptr<GeluMlp> make_projector(const EncoderConfig& encoder, const LlmConfig& llm, uint64_t seed, Group& tp) {
  MlpSpec m{"projector", encoder.hidden, llm.hidden, seed, 0.02, encoder.projector_act};
  return std::make_shared<GeluMlp>(m, tp, "linear_1", "linear_2", llm.hidden);
}

}  // namespace hetpar
