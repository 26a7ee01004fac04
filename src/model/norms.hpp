// Normalisation layers; their weights are replicated on every TP rank. With
// the whole sequence on every rank their inputs are too, so their gradients
// agree without communication; under sequence parallelism each rank sees its
// part of the sequence and its gradient is that part's, summed over the group
// once a step (tp/partial_grads.hpp).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace hetpar {

// x * rsqrt(mean(x^2) + eps) * weight over the last dimension, computed in
// fp32 and returned in x's type, saving for the backward only x and the fp32 reciprocal RMS of each
// row. On CUDA that is ATen's fused kernel. Elsewhere ATen composes it of
// ops whose backward also keeps the normalised rows, 4 bytes a value more
// (measured on the CPU: 2 x 4 x hidden bytes a token and layer); there an
// autograd function of hetpar's recomputes them in its backward instead.
// A bf16 x (a bf16 residual stream, run.fp32_residual = false) stays bf16:
// autocast would run the norm on an fp32 copy of x and keep that copy (4
// bytes a value); instead the fused kernel gets x and the weight cast to its
// type, and hetpar's function takes the fp32 weight as it is.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// x's rows normalised to zero mean and unit variance, then scaled and
// shifted: ATen's layer norm, which saves x and each row's mean and
// reciprocal deviation on every device. A bf16 x is normalised as it is, as
// in rms_norm, with the weight and bias cast to its type.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);
// Whether rms_norm's backward on `device` is hetpar's, in separate ops whose
// results it holds at once (the memory model counts them), or a fused kernel.
bool rms_norm_backward_is_unfused(const at::Device& device);

class RMSNorm : public torch::nn::Module {
 public:
  // `part_of_sequence`: each rank of a TP group of more than one normalises
  // its part of the sequence (sequence parallelism).
  RMSNorm(int64_t hidden, double eps, bool part_of_sequence = false) : eps_(eps), part_(part_of_sequence) {
    weight = register_parameter("weight", at::ones({hidden}));
  }
  at::Tensor forward(const at::Tensor& x) { return rms_norm(x, weight, eps_); }
  bool sees_part_of_sequence() const { return part_; }
  at::Tensor weight;

 private:
  double eps_;
  bool part_;
};

class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t hidden, double eps) : eps_(eps) {
    weight = register_parameter("weight", at::ones({hidden}));
    bias = register_parameter("bias", at::zeros({hidden}));
  }
  at::Tensor forward(const at::Tensor& x) { return layer_norm(x, weight, bias, eps_); }
  at::Tensor weight, bias;

 private:
  double eps_;
};

}  // namespace hetpar
