// One batch from a file, in transformers' conventions, as a step's samples
// (data/batch_source.hpp): `hetpar eval` runs it through any layout's
// schedule. The file (safetensors) holds input_ids [B, S] and labels [B, S]
// (int64; -100 = ignored; unshifted: label i is the token at position i) and
// pixel_values [K, C, H, W] (float32), one image per run of
// encoder.tokens_per_image() consecutive llm.image_token_id placeholders, in
// order. Each sample is padded to llm.seq_len (pad id 0, no target): causal
// attention keeps the padding out of the real positions. Every step is the
// same batch.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "data/batch_source.hpp"

namespace hetpar {

class FileBatch : public BatchSource {
 public:
  // Reads and checks the file against the model of `config`; throws
  // std::runtime_error naming the file and what is wrong.
  FileBatch(const std::string& path, const RunConfig& config, const at::Device& device = at::kCPU);
  SampleText text(int64_t step, int64_t sample) const override;
  at::Tensor image(int64_t step, int64_t sample, int index, int image_class) const override;
  std::string description() const override;
  int64_t samples() const { return static_cast<int64_t>(texts_.size()); }

 private:
  std::vector<SampleText> texts_;
  std::vector<int64_t> first_image_;  // a sample's first image in pixels_
  at::Tensor pixels_;                 // [K, C, H, W] fp32, on the host
};

// The [batch, sequence] shape of a batch file's input_ids.
std::pair<int64_t, int64_t> batch_file_shape(const std::string& path);

}  // namespace hetpar
