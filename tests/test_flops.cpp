// Model FLOPs accounting against hand-computed values and the 2021 closed form
// for GPT training FLOPs; dense device peaks by device name.
#include <gtest/gtest.h>

#include <cmath>

#include "metrics/device_peaks.hpp"
#include "metrics/model_flops.hpp"

namespace hetpar {
namespace {

// Encoder: image 32, patch 8 -> 16 tokens of 3·8·8 = 192 values; hidden 64, 1 layer, mlp 256.
EncoderConfig small_encoder() {
  EncoderConfig e;
  e.image_size = 32;
  e.patch_size = 8;
  e.channels = 3;
  e.hidden = 64;
  e.layers = 1;
  e.heads = 4;
  e.mlp_hidden = 256;
  return e;
}
constexpr double kEncoderPerImage = 2.0 * 16 * 192 * 64        // patch embedding    393216
                                    + 3 * (2.0 * 16 * 64 * 64)  // q, k, v            393216
                                    + 2 * (2.0 * 16 * 16 * 64)  // QKᵀ and A·V, full   65536
                                    + 2.0 * 16 * 64 * 64        // out projection     131072
                                    + 2 * (2.0 * 16 * 64 * 256);  // fc1 and fc2     1048576
static_assert(kEncoderPerImage == 2031616.0);

// LLM: hidden 32, 4 heads of 8, 2 kv heads (width 16), ffn 96, 1 layer, seq 8, vocab 100.
LlmConfig tiny_llm() {
  LlmConfig l;
  l.vocab_size = 100;
  l.hidden = 32;
  l.layers = 1;
  l.heads = 4;
  l.kv_heads = 2;
  l.ffn_hidden = 96;
  l.seq_len = 8;
  return l;
}
constexpr double kLlmPerSample = 2.0 * 8 * 32 * 32          // q                  16384
                                 + 2 * (2.0 * 8 * 32 * 16)  // k and v (GQA)      16384
                                 + 2 * (2.0 * 8 * 8 * 32) / 2  // QKᵀ, A·V, causal half 4096
                                 + 2.0 * 8 * 32 * 32        // o                  16384
                                 + 3 * (2.0 * 8 * 32 * 96)  // gate, up, down    147456
                                 + 2.0 * 8 * 32 * 100;      // LM head            51200
static_assert(kLlmPerSample == 251904.0);

// Projector into llm.hidden 32, per image of 16 tokens.
constexpr double kProjectorPerImage = 2.0 * 16 * 64 * 32   // linear_1   65536
                                      + 2.0 * 16 * 32 * 32;  // linear_2  32768

RunConfig small_run() {
  RunConfig c;
  c.encoder = small_encoder();
  c.llm = tiny_llm();
  c.data.global_batch_size = 2;
  c.data.images_min = 0;
  c.data.images_max = 3;
  return c;
}

TEST(ModelFlops, EncoderHandValue) {
  EXPECT_DOUBLE_EQ(encoder_forward_flops_per_image(small_encoder()), kEncoderPerImage);
}

TEST(ModelFlops, LlmHandValueWithGqaSwigluCausalHalf) {
  EXPECT_DOUBLE_EQ(llm_forward_flops_per_sample(tiny_llm()), kLlmPerSample);
  // Without the causal halving the attention term doubles: +4096.
  TransformerShape full = llm_shape(tiny_llm());
  full.causal_half = false;
  EXPECT_DOUBLE_EQ(transformer_forward_flops(full, 1, 8) - transformer_forward_flops(llm_shape(tiny_llm()), 1, 8),
                   4096.0);
}

TEST(ModelFlops, ProjectorHandValue) {
  EXPECT_DOUBLE_EQ(projector_forward_flops_per_image(small_encoder(), tiny_llm()), kProjectorPerImage);
}

TEST(ModelFlops, StepTrainableIsThreeTimesForward) {
  const StepFlops f = step_flops(small_run(), 3);
  EXPECT_DOUBLE_EQ(f.encoder_forward, 3 * kEncoderPerImage);
  EXPECT_DOUBLE_EQ(f.projector_forward, 3 * kProjectorPerImage);
  EXPECT_DOUBLE_EQ(f.llm_forward, 2 * kLlmPerSample);
  EXPECT_DOUBLE_EQ(f.encoder_training, 3 * f.encoder_forward);
  EXPECT_DOUBLE_EQ(f.projector_training, 3 * f.projector_forward);
  EXPECT_DOUBLE_EQ(f.llm_training, 3 * f.llm_forward);
  EXPECT_DOUBLE_EQ(f.total(), 3 * (3 * kEncoderPerImage + 3 * kProjectorPerImage + 2 * kLlmPerSample));
}

TEST(ModelFlops, FrozenEncoderCountsForwardOnly) {
  RunConfig c = small_run();
  c.encoder.frozen = true;
  const StepFlops f = step_flops(c, 3);
  EXPECT_DOUBLE_EQ(f.encoder_training, f.encoder_forward);
  EXPECT_DOUBLE_EQ(f.projector_training, 3 * f.projector_forward);
  EXPECT_DOUBLE_EQ(f.llm_training, 3 * f.llm_forward);
}

TEST(ModelFlops, ZeroImagesLeaveOnlyTheLlm) {
  const StepFlops f = step_flops(small_run(), 0);
  EXPECT_EQ(f.encoder_training, 0.0);
  EXPECT_EQ(f.projector_training, 0.0);
  EXPECT_DOUBLE_EQ(f.total(), 3 * 2 * kLlmPerSample);
}

TEST(ModelFlops, ImagePartIsLinearInImageCount) {
  const RunConfig c = small_run();
  const StepFlops one = step_flops(c, 1);
  for (int64_t n : {2, 5, 17}) {
    const StepFlops f = step_flops(c, n);
    EXPECT_DOUBLE_EQ(f.encoder_training, n * one.encoder_training);
    EXPECT_DOUBLE_EQ(f.projector_training, n * one.projector_training);
    EXPECT_DOUBLE_EQ(f.llm_training, one.llm_training);
  }
}

TEST(ModelFlops, ExpectedImagesPerStep) {
  RunConfig c = small_run();
  EXPECT_DOUBLE_EQ(expected_images_per_step(c), 2 * 1.5);
  c.data.files_images_per_sample = 0.25;  // measured from data.files: images_min/max no longer count
  EXPECT_DOUBLE_EQ(expected_images_per_step(c), 2 * 0.25);
}

// GPT shape (no GQA, ffn 4h, ungated, full attention) + untied head, ×3.
TEST(ModelFlops, GptShapeMatchesClosedForm) {
  struct Case { int64_t b, s, l, h, v; };
  for (const Case& k : {Case{1, 128, 2, 64, 512}, Case{8, 2048, 24, 2048, 50257}, Case{512, 2048, 96, 12288, 51200},
                        Case{3, 7, 5, 16, 11}}) {
    const TransformerShape gpt{k.h, k.l, 8, 8, 4 * k.h, false, false};
    const double ours = 3 * (transformer_forward_flops(gpt, k.b, k.s) + 2.0 * k.b * k.s * k.h * k.v);
    const double closed = gpt_closed_form_training_flops(k.b, k.s, k.l, k.h, k.v);
    EXPECT_NEAR(ours / closed, 1.0, 1e-12) << k.b << " " << k.s << " " << k.l << " " << k.h << " " << k.v;
  }
}

TEST(ModelFlops, AssumptionsStateTheConventions) {
  const std::string text = flops_assumptions(small_run());
  for (const char* part : {"2*M*K*N", "3x", "frozen encoder counts 1x", "causal LLM counts half", "optimizer",
                           "embedding lookups", "2.0316e+06", "2.5190e+05"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

TEST(DevicePeak, LookupByDeviceName) {
  const auto h200 = find_device_peak("NVIDIA H200");
  ASSERT_TRUE(h200.has_value());
  EXPECT_EQ(h200->model, "H200 SXM");
  EXPECT_EQ(h200->bf16_tflops, 989.0);

  const auto h100 = find_device_peak("NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->model, "H100 SXM");
  EXPECT_EQ(h100->bf16_tflops, 989.0);

  const auto a100 = find_device_peak("NVIDIA A100-SXM4-80GB");
  ASSERT_TRUE(a100.has_value());
  EXPECT_EQ(a100->bf16_tflops, 312.0);
  EXPECT_EQ(a100->fp32_tflops, 19.5);
  EXPECT_EQ(a100->tf32_tflops, 156.0);

  EXPECT_EQ(find_device_peak("NVIDIA H100 PCIe")->model, "H100 PCIe");
  EXPECT_EQ(find_device_peak("NVIDIA B200")->bf16_tflops, 2250.0);
  EXPECT_EQ(find_device_peak("nvidia h200")->model, "H200 SXM");  // case-insensitive
}

TEST(DevicePeak, UnknownDevicesMiss) {
  EXPECT_FALSE(find_device_peak("").has_value());
  EXPECT_FALSE(find_device_peak("cpu").has_value());
  EXPECT_FALSE(find_device_peak("Tesla V100-SXM2-16GB").has_value());
  EXPECT_FALSE(find_device_peak("NVIDIA GB200").has_value());  // not a B200: a word-start match only
}

}  // namespace
}  // namespace hetpar
