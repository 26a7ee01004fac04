// A deterministic, learnable multimodal data source. Every value is a
// function of (seed, step, sample index), so any layout, DP split or
// micro-batching sees exactly the same global batch.
//
// A sample of seq_len tokens: BOS, then for each of its k images (k uniform in
// [images_min, images_max]) a run of image placeholders followed by a text
// segment. An image shows one of kImageClasses patterns plus noise; the text
// after it counts upwards with a stride set by that class (stride 1 with no
// image). Predicting the text therefore needs the image: the loss falls as
// encoder, projector and LLM learn together.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "config/run_config.hpp"
#include "data/batch_source.hpp"

namespace hetpar {

inline constexpr int64_t kBosToken = 1;
inline constexpr int64_t kImageToken = 2;      // llm.image_token_id's default
inline constexpr int64_t kFirstTextToken = 3;  // pad, BOS and the placeholder come first: vocab - 3 text ids
inline constexpr int kImageClasses = 8;

// Training draws its steps' samples from one stream; held-out evaluation
// (run.eval_every) from another of the same seed: the same image classes and
// rules of the text, other samples.
enum class DataStream { kTraining, kHeldOut };

class SyntheticData : public BatchSource {
 public:
  SyntheticData(const EncoderConfig& encoder, const LlmConfig& llm, const DataConfig& data, uint64_t seed,
                const at::Device& device = at::kCPU, DataStream stream = DataStream::kTraining);
  SampleText text(int64_t step, int64_t sample) const override;
  at::Tensor image(int64_t step, int64_t sample, int index, int image_class) const override;
  std::string description() const override;

 private:
  // The INDEX-th text id: the ids above BOS, llm.image_token_id skipped.
  int64_t text_token(int64_t index) const;
  DataConfig data_;
  uint64_t seed_;
  uint64_t salt_;  // the stream's: added to every sample's own salts
  std::vector<at::Tensor> class_patterns_;
};

}  // namespace hetpar
