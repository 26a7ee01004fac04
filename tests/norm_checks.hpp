// A bf16 residual stream (run.fp32_residual = false) reaches the norms in
// bf16 under autocast, on the CPU (test_tp_layers) and on a GPU (test_gpu,
// where ATen's fused RMSNorm runs): each norm returns bf16 (autocast alone
// would make it fp32 on CUDA and keep an fp32 copy of the input), its
// weights' gradients are fp32, and the values match the norm of the same
// input in fp32 within bf16's rounding (2e-2 of the largest value). An fp32
// input keeps autocast's way: an fp32 output.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "model/autocast_scope.hpp"
#include "model/norms.hpp"

namespace hetpar::test {

inline void expect_bf16_norms_match_fp32(const at::Device& device) {
  const int64_t hidden = 64;
  at::manual_seed(11);
  const auto on = at::TensorOptions(at::kFloat).device(device);
  const at::Tensor x0 = at::randn({4, 24, hidden}, on).to(at::kBFloat16), dy = at::randn({4, 24, hidden}, on);
  RMSNorm rms(hidden, 1e-5);
  LayerNorm layer(hidden, 1e-6);
  rms.to(device);
  layer.to(device);
  {
    const at::NoGradGuard no_grad;
    const at::Tensor scale = 1 + 0.1 * at::randn({hidden}, on), shift = 0.1 * at::randn({hidden}, on);
    rms.weight.copy_(scale);
    layer.weight.copy_(scale);
    layer.bias.copy_(shift);
  }
  const auto check = [&](const char* what, const std::function<at::Tensor(const at::Tensor&)>& norm,
                         const std::vector<at::Tensor>& params) {
    const at::Tensor x = x0.detach().clone().set_requires_grad(true);
    at::Tensor y;
    {
      const AutocastScope autocast(true);
      y = norm(x);
    }
    ASSERT_EQ(y.scalar_type(), at::kBFloat16) << what;
    y.backward(dy.to(at::kBFloat16));
    EXPECT_EQ(x.grad().scalar_type(), at::kBFloat16) << what;
    std::vector<at::Tensor> got;
    for (const at::Tensor& p : params) {
      ASSERT_EQ(p.grad().scalar_type(), at::kFloat) << what;
      got.push_back(p.grad().clone());
      p.mutable_grad().reset();
    }
    const at::Tensor x32 = x0.to(at::kFloat).set_requires_grad(true);
    const at::Tensor want = norm(x32);  // no autocast: all fp32
    ASSERT_EQ(want.scalar_type(), at::kFloat);
    want.backward(dy);
    auto close = [&](const at::Tensor& a, const at::Tensor& b, const std::string& part) {
      const double largest = b.abs().max().item<double>();
      EXPECT_LE((a.to(at::kFloat) - b).abs().max().item<double>(), 2e-2 * largest) << what << " " << part;
    };
    close(y, want.detach(), "output");
    close(x.grad(), x32.grad(), "input gradient");
    for (size_t i = 0; i < params.size(); ++i) {
      close(got[i], params[i].grad(), "weight gradient " + std::to_string(i));
      params[i].mutable_grad().reset();
    }
  };
  check("rms_norm", [&](const at::Tensor& x) { return rms.forward(x); }, {rms.weight});
  check("layer_norm", [&](const at::Tensor& x) { return layer.forward(x); }, {layer.weight, layer.bias});
  const AutocastScope autocast(true);
  EXPECT_EQ(layer.forward(x0.to(at::kFloat)).scalar_type(), at::kFloat);
  EXPECT_EQ(rms.forward(x0.to(at::kFloat)).scalar_type(), at::kFloat);
}

}  // namespace hetpar::test
