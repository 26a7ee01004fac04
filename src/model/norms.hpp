// Normalisation layers; their weights are replicated on every TP rank (their
// inputs are, so their gradients agree without communication).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace hetpar {

// ATen's rms_norm: one fused kernel where the device has one (CUDA), the
// same formula composed of ops elsewhere: x * rsqrt(mean(x^2) + eps) * weight.
class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t hidden, double eps) : hidden_(hidden), eps_(eps) {
    weight = register_parameter("weight", at::ones({hidden}));
  }
  at::Tensor forward(const at::Tensor& x) { return at::rms_norm(x, {hidden_}, weight, eps_); }
  at::Tensor weight;

 private:
  int64_t hidden_;
  double eps_;
};

class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t hidden, double eps) : hidden_(hidden), eps_(eps) {
    weight = register_parameter("weight", at::ones({hidden}));
    bias = register_parameter("bias", at::zeros({hidden}));
  }
  at::Tensor forward(const at::Tensor& x) { return at::layer_norm(x, {hidden_}, weight, bias, eps_); }
  at::Tensor weight, bias;

 private:
  int64_t hidden_;
  double eps_;
};

}  // namespace hetpar
