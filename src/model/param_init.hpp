// Layout-independent initialisation: a parameter's full value depends only on
// (seed, name, full shape), so every layout starts from identical weights;
// each rank then keeps its shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace hetpar {

// Normal(0, std) values of the full parameter, on the CPU in fp32.
at::Tensor init_normal(uint64_t seed, const std::string& name, at::IntArrayRef full_shape, double std);

// Part `index` of `parts` equal parts of `full` along `dim` (contiguous copy).
at::Tensor shard(const at::Tensor& full, int64_t dim, int index, int parts);

}  // namespace hetpar
