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

namespace hetpar {

inline constexpr int64_t kBosToken = 1;
inline constexpr int64_t kImageToken = 2;      // llm.image_token_id's default
inline constexpr int64_t kFirstTextToken = 3;  // pad, BOS and the placeholder come first: vocab - 3 text ids
inline constexpr int kImageClasses = 8;

struct SampleText {
  std::vector<int64_t> ids;          // seq_len tokens
  std::vector<int64_t> targets;      // next token, or -100 (no loss)
  std::vector<int> image_classes;    // one per image, in order
};

struct MicroBatch {
  at::Tensor ids;         // [B, S] int64
  at::Tensor targets;     // [B, S] int64, -100 = ignored
  at::Tensor image_mask;  // [B, S] bool: placeholder positions
  at::Tensor image_mask_host;  // the same on the host: index lists from it need no device read
  at::Tensor pixels;      // [K, C, H, W] fp32: the batch's images, sample by sample
  int64_t images = 0;
};

class SyntheticData {
 public:
  // Batches are drawn on the host (the same values on every device) and
  // handed out on `device`.
  SyntheticData(const EncoderConfig& encoder, const LlmConfig& llm, const DataConfig& data, uint64_t seed,
                const at::Device& device = at::kCPU);
  const at::Device& device() const { return device_; }
  // A host tensor of a batch on the data's device: on a GPU an asynchronous
  // copy from pinned memory, the one host-to-device copy of a step.
  at::Tensor on_device(const at::Tensor& host) const;

  SampleText text(int64_t step, int64_t sample) const;
  at::Tensor image(int64_t step, int64_t sample, int index, int image_class) const;  // [C, H, W]
  // Samples [first, first + count) of the step's global batch. Without
  // `with_pixels` the images are counted but not drawn: for ranks whose
  // images come from the boundary (or never), a text-only batch.
  MicroBatch micro_batch(int64_t step, int64_t first, int64_t count, bool with_pixels = true) const;
  // Target tokens in the whole global batch of a step: the loss divisor.
  int64_t target_tokens(int64_t step) const;
  // Images in the whole global batch of a step (for its FLOPs).
  int64_t images_in_step(int64_t step) const;

 private:
  // The INDEX-th text id: the ids above BOS, llm.image_token_id skipped.
  int64_t text_token(int64_t index) const;
  EncoderConfig encoder_;
  LlmConfig llm_;
  DataConfig data_;
  uint64_t seed_;
  at::Device device_;
  std::vector<at::Tensor> class_patterns_;
};

}  // namespace hetpar
