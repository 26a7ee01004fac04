#include "metrics/model_flops.hpp"

#include <cstdio>

namespace hetpar {
namespace {

// 2·M·K·N, in double: paper-scale products overflow int64.
double matmul(double m, double k, double n) { return 2.0 * m * k * n; }

constexpr double kTrainable = 3.0;  // forward + input grads + weight grads
constexpr double kFrozen = 1.0;     // forward only

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4e", v);
  return buf;
}

}  // namespace

double transformer_forward_flops(const TransformerShape& t, int64_t sequences, int64_t seq_len) {
  const double h = static_cast<double>(t.hidden), f = static_cast<double>(t.ffn_hidden);
  const double head_dim = static_cast<double>(t.hidden / t.heads);
  const double q_width = t.heads * head_dim, kv_width = t.kv_heads * head_dim;
  const double tokens = static_cast<double>(sequences) * static_cast<double>(seq_len);
  const double s = static_cast<double>(seq_len);

  const double projections = matmul(tokens, h, q_width) + 2 * matmul(tokens, h, kv_width) + matmul(tokens, q_width, h);
  const double mlp = (t.gated_mlp ? 3 : 2) * matmul(tokens, h, f);
  // QKᵀ and A·V: each 2·s²·d per sequence; a causal mask leaves half useful.
  double attention = static_cast<double>(sequences) * 2 * matmul(s, q_width, s);
  if (t.causal_half) attention /= 2;
  return static_cast<double>(t.layers) * (projections + mlp + attention);
}

TransformerShape encoder_shape(const EncoderConfig& e) {
  return {e.hidden, e.layers, e.heads, e.heads, e.mlp_hidden, /*gated_mlp=*/false, /*causal_half=*/false};
}

TransformerShape llm_shape(const LlmConfig& l) {
  return {l.hidden, l.layers, l.heads, l.kv_heads, l.ffn_hidden, /*gated_mlp=*/true, /*causal_half=*/true};
}

double encoder_forward_flops_per_image(const EncoderConfig& e) {
  const double patches = static_cast<double>(e.patches_per_image());
  const double patch = matmul(patches, static_cast<double>(e.channels * e.patch_size * e.patch_size), e.hidden);
  return patch + transformer_forward_flops(encoder_shape(e), 1, e.patches_per_image());
}

double projector_forward_flops_per_image(const EncoderConfig& e, const LlmConfig& l) {
  const double tokens = static_cast<double>(e.tokens_per_image());
  return matmul(tokens, e.hidden, l.hidden) + matmul(tokens, l.hidden, l.hidden);
}

double llm_forward_flops_per_sample(const LlmConfig& l) {
  const double head = matmul(l.seq_len, l.hidden, l.vocab_size);  // untied LM head over every position
  return transformer_forward_flops(llm_shape(l), 1, l.seq_len) + head;
}

StepFlops step_flops(const RunConfig& c, int64_t images_in_step) {
  const double images = static_cast<double>(images_in_step);
  StepFlops f;
  f.encoder_forward = images * encoder_forward_flops_per_image(c.encoder);
  f.projector_forward = images * projector_forward_flops_per_image(c.encoder, c.llm);
  f.llm_forward = static_cast<double>(c.data.global_batch_size) * llm_forward_flops_per_sample(c.llm);
  f.encoder_training = (c.encoder.frozen ? kFrozen : kTrainable) * f.encoder_forward;
  f.projector_training = kTrainable * f.projector_forward;
  f.llm_training = kTrainable * f.llm_forward;
  return f;
}

double expected_images_per_step(const RunConfig& c) {
  const double per_sample = c.data.files_images_per_sample.value_or(
      static_cast<double>(c.data.images_min + c.data.images_max) / 2);
  return static_cast<double>(c.data.global_batch_size) * per_sample;
}

std::string flops_assumptions(const RunConfig& c) {
  const double images = expected_images_per_step(c);
  const StepFlops per_image = step_flops(c, 1);
  std::string s;
  s += "model FLOPs (no recompute): a matmul (MxK)(KxN) is 2*M*K*N forward\n";
  s += "training = 3x forward for trainable modules; a frozen encoder counts 1x\n";
  s += "attention per layer and sequence: QK^T + A*V = 4*s^2*d; the causal LLM counts half, the encoder all\n";
  s += "excluded: norms, softmax, activations, RoPE, biases, embedding lookups, loss, optimizer\n";
  s += "encoder (" + std::string(c.encoder.frozen ? "frozen, 1x" : "trainable, 3x") +
       "): forward per image " + sci(encoder_forward_flops_per_image(c.encoder)) + "\n";
  s += "projector (trainable, 3x): forward per image " + sci(projector_forward_flops_per_image(c.encoder, c.llm)) + "\n";
  s += "llm (trainable, 3x): forward per sample of " + std::to_string(c.llm.seq_len) + " tokens " +
       sci(llm_forward_flops_per_sample(c.llm)) + "\n";
  const double image_training = per_image.encoder_training + per_image.projector_training;
  char expected[32];
  std::snprintf(expected, sizeof expected, "%g", images);
  s += "training per step of " + std::to_string(c.data.global_batch_size) + " samples: llm " +
       sci(per_image.llm_training) + " + " + sci(image_training) + " per image; at the expected " + expected +
       " images " + sci(per_image.llm_training + images * image_training) + "\n";
  return s;
}

double gpt_closed_form_training_flops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden, int64_t vocab) {
  const double b = static_cast<double>(batch), s = static_cast<double>(seq), l = static_cast<double>(layers);
  const double h = static_cast<double>(hidden), v = static_cast<double>(vocab);
  return 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
}

int64_t encoder_parameters(const EncoderConfig& e) {
  const int64_t h = e.hidden, m = e.mlp_hidden;
  const int64_t patch = e.channels * e.patch_size * e.patch_size * h + h;
  const int64_t block = 2 * h + 4 * (h * h + h) + 2 * h + (h * m + m) + (m * h + h);  // LNs, q/k/v/o, fc1, fc2
  return patch + e.patches_per_image() * h + e.layers * block;
}

int64_t projector_parameters(const EncoderConfig& e, const LlmConfig& l) {
  return (e.hidden * l.hidden + l.hidden) + (l.hidden * l.hidden + l.hidden);
}

int64_t llm_parameters(const LlmConfig& l) {
  const int64_t h = l.hidden, kv = l.kv_heads * (h / l.heads);
  const int64_t block = 2 * h + (h * h + 2 * h * kv + h * h) + 3 * h * l.ffn_hidden;  // RMSNorms, q/k/v/o, SwiGLU
  return 2 * l.vocab_size * h + l.layers * block + h;
}

}  // namespace hetpar
