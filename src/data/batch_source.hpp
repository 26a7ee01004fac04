// Where a step's samples come from: a sample's text (ids, pre-shifted
// targets, one entry per image) and its images, by (step, sample index). Micro-batches,
// the loss divisor and the image count are made from those two the same way
// for every source, so any layout, DP split or micro-batching of a step sees
// the same samples. Sources: data/synthetic_data.hpp (training) and
// data/file_batch.hpp (one batch file, for `hetpar eval`).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace hetpar {

struct SampleText {
  std::vector<int64_t> ids;          // seq_len tokens
  std::vector<int64_t> targets;      // next token, or -100 (no loss)
  std::vector<int> image_classes;    // one per image, in order (what a source draws it from)
};

struct MicroBatch {
  at::Tensor ids;         // [B, S] int64
  at::Tensor targets;     // [B, S] int64, -100 = ignored
  at::Tensor image_mask;  // [B, S] bool: placeholder positions
  at::Tensor image_mask_host;  // the same on the host: index lists from it need no device read
  at::Tensor pixels;      // [K, C, H, W] fp32: the batch's images, sample by sample
  int64_t images = 0;
};

class BatchSource {
 public:
  // Batches are made on the host and handed out on `device`; a step holds
  // `global_batch_size` samples.
  BatchSource(const EncoderConfig& encoder, const LlmConfig& llm, int64_t global_batch_size, const at::Device& device);
  virtual ~BatchSource() = default;

  virtual SampleText text(int64_t step, int64_t sample) const = 0;
  virtual at::Tensor image(int64_t step, int64_t sample, int index, int image_class) const = 0;  // [C, H, W]

  // What the samples are, for the run's log.
  virtual std::string description() const = 0;

  const at::Device& device() const { return device_; }
  // A host tensor of a batch on the data's device: on a GPU an asynchronous
  // copy from pinned memory, the one host-to-device copy of a step.
  at::Tensor on_device(const at::Tensor& host) const;
  // Samples [first, first + count) of the step's global batch. Without
  // `with_pixels` the images are counted but not drawn: for ranks whose
  // images come from the boundary (or never), a text-only batch.
  MicroBatch micro_batch(int64_t step, int64_t first, int64_t count, bool with_pixels = true) const;
  // Target tokens in the whole global batch of a step: the loss divisor.
  int64_t target_tokens(int64_t step) const;
  // The same, as the divisor of a training step or of held-out batches
  // 1..`batches` (`what` names them in the error): with no target token the
  // loss would be 0/0, a NaN read as a divergence, so it is an error naming
  // the data instead.
  double loss_divisor(int64_t first, int64_t last, const std::string& what) const;
  // Images in the whole global batch of a step (for its FLOPs).
  int64_t images_in_step(int64_t step) const;

 protected:
  EncoderConfig encoder_;
  LlmConfig llm_;
  int64_t global_batch_size_;
  at::Device device_;
};

}  // namespace hetpar
