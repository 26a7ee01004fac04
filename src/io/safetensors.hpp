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

// Writes CPU tensors (float32, bfloat16, float16, float64, int64, int32, bool, uint8), in the order given.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

// One tensor's entry in a file's header: where its bytes lie.
struct SafetensorsEntry {
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets after the header
};
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;
  uint64_t data_start = 0;  // file offset of the first tensor's bytes
};

// A file's header alone (a rank that needs a few tensors of a large file reads
// only those); throws std::runtime_error naming the file, the tensor and what
// is wrong (missing, bad header, unsupported dtype, a negative or overflowing
// shape, offsets that do not fit the shape or lie past the end of the file).
SafetensorsHeader read_safetensors_header(const std::string& path);

// Tensor `name`'s entry in the header of file `path`; throws
// std::runtime_error naming both when the file holds no such tensor.
const SafetensorsEntry& safetensors_entry(const SafetensorsHeader& header, const std::string& path,
                                          const std::string& name);

// Reads every tensor of a file; throws std::runtime_error naming the file and
// what is wrong (missing, truncated, bad header, unsupported dtype).
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);
// The named tensors only (each must be in the file), given the file's header.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path, const SafetensorsHeader& header,
                                                   const std::vector<std::string>& names);
// Rows [first, first + count) of tensor `name` (along its first dimension),
// read alone: a sample of a large data shard without the rest of it.
at::Tensor read_safetensors_rows(const std::string& path, const SafetensorsHeader& header, const std::string& name,
                                 int64_t first, int64_t count);

}  // namespace hetpar
