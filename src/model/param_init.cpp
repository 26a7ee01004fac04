#include "model/param_init.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>

namespace hetpar {
namespace {

// FNV-1a over the name and the shape: a stable 64-bit stream id per parameter.
uint64_t stream_id(uint64_t seed, const std::string& name, at::IntArrayRef shape) {
  uint64_t h = 1469598103934665603ull ^ seed;
  auto mix = [&h](uint64_t byte) {
    h ^= byte;
    h *= 1099511628211ull;
  };
  for (unsigned char c : name) mix(c);
  for (int64_t d : shape) {
    for (int i = 0; i < 8; ++i) mix(static_cast<uint64_t>(d >> (8 * i)) & 0xff);
  }
  return h;
}

}  // namespace

at::Tensor init_normal(uint64_t seed, const std::string& name, at::IntArrayRef full_shape, double std) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(stream_id(seed, name, full_shape));
  return at::normal(0.0, std, full_shape, gen, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor shard(const at::Tensor& full, int64_t dim, int index, int parts) {
  if (full.size(dim) % parts != 0) {
    throw std::invalid_argument("cannot cut dim " + std::to_string(dim) + " of size " +
                                std::to_string(full.size(dim)) + " into " + std::to_string(parts) + " parts");
  }
  const int64_t len = full.size(dim) / parts;
  // A copy of its own: a contiguous slice (any cut of dim 0) would otherwise
  // stay a view keeping the whole tensor alive, so a TP rank held every
  // column-parallel weight and the vocabulary tables in full.
  return full.narrow(dim, index * len, len).clone(at::MemoryFormat::Contiguous);
}

}  // namespace hetpar
