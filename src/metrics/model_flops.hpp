// Model FLOPs of one training step (no recompute), for TFLOPS/GPU and MFU.
// Conventions: a matmul (M×K)·(K×N) is 2·M·K·N forward; training is 3× forward
// for a trainable module (forward, input grads, weight grads) and 1× for a
// frozen encoder (nothing trainable upstream, so no backward runs through it).
// Only matmuls count: norms, softmax, activations, RoPE, biases, embedding
// lookups, the loss and the optimizer are excluded.
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.hpp"

namespace hetpar {

// The shape of a stack of transformer blocks. head_dim = hidden / heads.
struct TransformerShape {
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;     // = heads without GQA
  int64_t ffn_hidden = 0;
  bool gated_mlp = false;   // SwiGLU: gate, up and down; else fc1 and fc2
  bool causal_half = false; // count half the s² attention terms (causal mask)
};

// Forward FLOPs of the blocks only (no embeddings, no head) over `sequences`
// sequences of `seq_len` tokens, each attending only within itself.
double transformer_forward_flops(const TransformerShape& shape, int64_t sequences, int64_t seq_len);

TransformerShape encoder_shape(const EncoderConfig& encoder);  // bidirectional, GELU MLP
TransformerShape llm_shape(const LlmConfig& llm);              // causal half, GQA, SwiGLU

// Forward FLOPs of one unit of work of each module.
double encoder_forward_flops_per_image(const EncoderConfig& encoder);
double projector_forward_flops_per_image(const EncoderConfig& encoder, const LlmConfig& llm);
double llm_forward_flops_per_sample(const LlmConfig& llm);  // seq_len tokens, LM head included

// Parameters of each module, full (unsharded): sizes for reports and plots.
int64_t encoder_parameters(const EncoderConfig& encoder);  // patch + position embeddings, blocks
int64_t projector_parameters(const EncoderConfig& encoder, const LlmConfig& llm);
int64_t llm_parameters(const LlmConfig& llm);               // embedding, blocks, final norm, head

// One optimizer step of the whole job (all ranks together).
struct StepFlops {
  double encoder_forward = 0, projector_forward = 0, llm_forward = 0;
  double encoder_training = 0, projector_training = 0, llm_training = 0;  // with the 3×/1× multipliers
  double total() const { return encoder_training + projector_training + llm_training; }
};

// A step of data.global_batch_size samples holding `images_in_step` images in all.
StepFlops step_flops(const RunConfig& config, int64_t images_in_step);

// Images per step on average: with data.files their measured mean a sample
// (data.files_images_per_sample), else the synthetic data's, uniform in
// [images_min, images_max].
double expected_images_per_step(const RunConfig& config);

// The conventions and the per-module forward FLOPs, as human-readable lines.
std::string flops_assumptions(const RunConfig& config);

// The 2021 closed form for GPT training FLOPs without recompute:
// 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) — full (unhalved) attention, untied head.
double gpt_closed_form_training_flops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden, int64_t vocab);

}  // namespace hetpar
