#include "data/synthetic_data.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <fmt/format.h>

#include <random>

#include "model/param_init.hpp"

namespace hetpar {
namespace {

constexpr double kPixelNoise = 0.3;
// Above every salt a sample uses (1 for its text, 100 + i for its images).
constexpr uint64_t kHeldOutSalt = uint64_t{1} << 20;

uint64_t sample_seed(uint64_t seed, int64_t step, int64_t sample, uint64_t salt) {
  auto lo = [](uint64_t v) { return static_cast<uint32_t>(v); };
  auto hi = [](uint64_t v) { return static_cast<uint32_t>(v >> 32); };
  std::seed_seq seq{lo(seed), hi(seed), lo(step), hi(step), lo(sample), hi(sample), lo(salt)};
  uint32_t out[2];
  seq.generate(out, out + 2);
  return (static_cast<uint64_t>(out[1]) << 32) | out[0];
}

}  // namespace

SyntheticData::SyntheticData(const EncoderConfig& encoder, const LlmConfig& llm, const DataConfig& data, uint64_t seed,
                             const at::Device& device, DataStream stream)
    : BatchSource(encoder, llm, data.global_batch_size, device), data_(data), seed_(seed),
      salt_(stream == DataStream::kHeldOut ? kHeldOutSalt : 0) {
  for (int c = 0; c < kImageClasses; ++c) {
    class_patterns_.push_back(init_normal(seed, "data.class_pattern." + std::to_string(c),
                                          {encoder.channels, encoder.image_size, encoder.image_size}, 1.0));
  }
}

int64_t SyntheticData::text_token(int64_t index) const {
  const int64_t id = kBosToken + 1 + index;  // the ids above BOS, the placeholder skipped
  return id < llm_.image_token_id ? id : id + 1;
}

SampleText SyntheticData::text(int64_t step, int64_t sample) const {
  std::mt19937_64 rng(sample_seed(seed_, step, sample, salt_ + 1));
  const int64_t k = std::uniform_int_distribution<int64_t>(data_.images_min, data_.images_max)(rng);
  const int64_t text_vocab = llm_.vocab_size - kFirstTextToken;
  const int64_t tpi = encoder_.tokens_per_image();
  SampleText s;
  s.ids.push_back(kBosToken);
  const int64_t text_total = llm_.seq_len - 1 - k * tpi;
  const int64_t segments = std::max<int64_t>(k, 1);
  for (int64_t j = 0; j < segments; ++j) {
    int64_t stride = 1;
    if (j < k) {
      const int cls = std::uniform_int_distribution<int>(0, kImageClasses - 1)(rng);
      s.image_classes.push_back(cls);
      stride = cls + 2;
      s.ids.insert(s.ids.end(), tpi, llm_.image_token_id);
    }
    const int64_t length = text_total / segments + (j + 1 == segments ? text_total % segments : 0);
    int64_t token = std::uniform_int_distribution<int64_t>(0, text_vocab - 1)(rng);
    for (int64_t t = 0; t < length; ++t, token = (token + stride) % text_vocab) s.ids.push_back(text_token(token));
  }
  s.targets.assign(s.ids.size(), -100);
  for (size_t i = 0; i + 1 < s.ids.size(); ++i) {
    if (s.ids[i + 1] > kBosToken && s.ids[i + 1] != llm_.image_token_id) s.targets[i] = s.ids[i + 1];
  }
  return s;
}

at::Tensor SyntheticData::image(int64_t step, int64_t sample, int index, int image_class) const {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(sample_seed(seed_, step, sample, salt_ + 100 + index));
  const at::Tensor& pattern = class_patterns_[image_class];
  return pattern + kPixelNoise * at::randn(pattern.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
}

std::string SyntheticData::description() const {
  return fmt::format("synthetic data{} (seed {})", salt_ == 0 ? "" : ", held-out samples", seed_);
}

}  // namespace hetpar
