// The safetensors file format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}}, then the raw tensor bytes.
// The interchange format of Hugging Face checkpoints.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hetpar {

// Writes CPU tensors (float32, bfloat16, float16, int64, int32, bool), in the order given.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

// Reads every tensor of a file; throws std::runtime_error naming the file and
// what is wrong (missing, truncated, bad header, unsupported dtype).
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);

}  // namespace hetpar
