// The end-to-end model of one rank: encoder + projector on the encoder's TP
// group, LLM on the LLM's. (Under the uniform placement both are one group;
// heterogeneous layouts put a boundary communicator between projector and LLM.)
#pragma once

#include <memory>
#include <vector>

#include "config/run_config.hpp"
#include "data/batch_source.hpp"
#include "model/llama.hpp"
#include "model/vision_encoder.hpp"

namespace hetpar {

class MultimodalModel {
 public:
  // A module is built only where its TP group is given: a non-colocated rank
  // holds the encoder and projector, or the LLM. Given `llm_cp` (the LLM's
  // CP group), the LLM runs on this rank's part of each sequence; under
  // pipeline parallelism the rank holds stage `llm_stage` of the LLM or stage
  // `encoder_stage` of the encoder (the projector with its last stage).
  MultimodalModel(const RunConfig& config, Group* encoder_tp, Group* llm_tp, Group* llm_cp = nullptr,
                  int llm_stage = 0, int encoder_stage = 0);

  // Moves every parameter and buffer to `device` (they are drawn on the host,
  // so every device starts from the same values).
  void to(const at::Device& device);
  const at::Device& device() const { return device_; }

  // Pixels [K, C, H, W] -> embedding rows [K * tokens_per_image, llm hidden],
  // image by image, in activation_dtype(). No images: an empty leaf that
  // requires grad, so the boundary's backward still runs on this rank.
  at::Tensor encode(const at::Tensor& pixels);
  // This rank's encoder pipeline stage: from pixels [K, C, H, W] (the first
  // stage) or the previous stage's activations `hidden` [K, patches, encoder
  // hidden], to the next stage's activations or (the last stage) the rows
  // `encode` gives. With the whole encoder on the rank it is `encode`.
  at::Tensor encoder_stage(const at::Tensor& pixels, const at::Tensor& hidden);
  bool encoder_last_stage() const { return projector != nullptr; }
  // The LLM's logits for token ids with image rows spliced in at the mask.
  at::Tensor llm_logits(const at::Tensor& ids, const at::Tensor& image_rows, const at::Tensor& image_mask);
  // This rank's LLM pipeline stage: from ids and image rows (the first stage)
  // or the previous stage's activations `hidden` [B, S, hidden], to the next
  // stage's activations or (the last stage) the logits.
  at::Tensor llm_stage(const at::Tensor& ids, const at::Tensor& image_rows, const at::Tensor& image_mask,
                       const at::Tensor& hidden);
  // Both modules on this rank's samples (the uniform layout): the sum over the
  // micro-batch's target tokens of the token cross-entropy.
  at::Tensor loss_sum(const MicroBatch& batch);

  // Trainable parameters (the encoder's only when it is not frozen).
  std::vector<at::Tensor> trainable_parameters() const;
  // Trainable parameters split by TP group, for norms: `sharded` differ
  // across the group's ranks, `replicated` are identical on every rank.
  struct ParameterSets {
    std::vector<at::Tensor> sharded, replicated;
    std::vector<at::Tensor> all() const;  // sharded, then replicated
  };
  ParameterSets encoder_side() const;
  ParameterSets llm_side() const;

  // Every parameter with its name ("encoder.", "projector.", "llm." + the
  // module path) and the dimension its TP layer shards (-1: replicated).
  struct NamedParameter {
    std::string name;
    at::Tensor tensor;
    int shard_dim;
    bool on_encoder_side;  // encoder or projector: sharded over the encoder's TP group
  };
  std::vector<NamedParameter> named_parameters() const;

  // What the boundary moves: bf16 under run.precision = "bf16", else fp32.
  at::ScalarType activation_dtype() const { return bf16_ ? at::kBFloat16 : at::kFloat; }
  // Tensors of `dtype` on the model's device (receive buffers, losses).
  at::TensorOptions options(at::ScalarType dtype) const { return at::TensorOptions(dtype).device(device_); }
  at::TensorOptions activation_options() const { return options(activation_dtype()); }
  // The residual stream's type, in which pipeline stages pass activations and
  // their gradients: bf16 under run.fp32_residual = false in bf16, else fp32.
  at::ScalarType residual_dtype() const { return bf16_residual_ ? at::kBFloat16 : at::kFloat; }
  at::TensorOptions residual_options() const { return options(residual_dtype()); }

  std::shared_ptr<VisionEncoder> encoder;  // null where the rank holds no encoder
  std::shared_ptr<GeluMlp> projector;
  std::shared_ptr<LlamaModel> llm;         // null where the rank holds no LLM

 private:
  int64_t llm_hidden_;
  bool encoder_frozen_;
  bool bf16_;  // forwards under bf16 autocast
  bool bf16_residual_;
  at::Device device_{at::kCPU};
};

}  // namespace hetpar
