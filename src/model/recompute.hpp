// Activation recompute (run.recompute = "full"): a transformer layer keeps
// only its input for the backward. Its forward runs without a graph; when the
// backward reaches it, it runs again from the saved input with a graph, under
// the autocast of the first run, and that graph's backward adds the weights'
// gradients into .grad and returns the input's. The numbers are those of the
// layer run with a graph (the same kernels on the same values), at the cost of
// a second forward; a TP or CP layer repeats its forward collectives, on every
// rank of the group alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>

namespace hetpar {

// `layer(x)` keeping only `x` for the backward. Without grad mode, or where
// neither `x` nor any of `module`'s parameters needs a gradient, it is
// `layer(x)`. `layer` must be a pure function of `x` and `module`'s weights
// (no randomness; the weights unchanged until the backward).
at::Tensor recompute_in_backward(const torch::nn::Module& module,
                                 const std::function<at::Tensor(const at::Tensor&)>& layer, const at::Tensor& x);

}  // namespace hetpar
