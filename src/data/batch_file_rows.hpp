// The batch-file format's rules for one sample, shared by a single batch file
// (data/file_batch.hpp) and a directory of them (data/file_dataset.hpp):
// input_ids and labels in transformers' conventions (labels unshifted, -100 =
// ignored) become hetpar's pre-shifted targets, padded to llm.seq_len (pad id
// 0, no target: causal attention keeps the padding out of the real
// positions); every id and label lies in the vocabulary; each image is a run
// of encoder.tokens_per_image() consecutive llm.image_token_id placeholders.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "config/run_config.hpp"
#include "data/batch_source.hpp"
#include "io/safetensors.hpp"

namespace hetpar {

// One sample from its rows of `length` tokens; throws std::runtime_error
// starting with `where` (the file and the sample) when a rule is broken.
SampleText sample_from_rows(const int64_t* ids, const int64_t* labels, int64_t length, const RunConfig& config,
                            const std::string& where);

// A batch file's header, for a single file and a directory of them alike:
// input_ids and labels integers [batch, sequence] of at most llm.seq_len
// tokens, pixel_values floats [images, C, H, W] as the encoder takes them;
// throws naming `path` and the tensor.
void check_batch_header(const SafetensorsHeader& header, const RunConfig& config, const std::string& path);

// pixel_values rows (images `first` on of file `path`, as float32) hold no
// NaN or infinity; throws naming the file and the image.
void check_finite_pixels(const at::Tensor& pixels, int64_t first, const std::string& path);

// A file's `image_counts` as numbers, checked: one count a sample of `samples`,
// none negative, adding up to `images` (pixel_values' rows); throws naming `path`.
std::vector<int64_t> checked_image_counts(const at::Tensor& counts, int64_t samples, int64_t images,
                                          const std::string& path);

// A sample's images by its placeholders (`counted`) against its file's
// image_counts (`declared`); throws starting with `where` when they differ.
void check_image_count(int64_t counted, int64_t declared, const std::string& where);

}  // namespace hetpar
