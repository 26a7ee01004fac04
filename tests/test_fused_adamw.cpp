// The fused AdamW against torch::optim::AdamW (the per-parameter loop it
// replaces): same decay rule (matrices only), same settings, several steps
// with changing gradients and learning rates; equal to fp32 rounding.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include "train/fused_adamw.hpp"

namespace hetpar {
namespace {

TEST(FusedAdamW, MatchesTheReferenceAdamWToFp32Rounding) {
  OptimConfig o;
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  at::manual_seed(7);
  std::vector<at::Tensor> ours, theirs, inits;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{64, 32}, {32}, {16, 8, 4}, {5}}) {
    const at::Tensor init = at::randn(shape);
    inits.push_back(init);
    ours.push_back(init.clone().requires_grad_(true));
    theirs.push_back(init.clone().requires_grad_(true));
  }
  FusedAdamW fused(ours, o);
  // The reference: two groups, weight decay on matrices only.
  std::vector<at::Tensor> decay, no_decay;
  for (const at::Tensor& p : theirs) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
  auto no_decay_options = options;
  no_decay_options.weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(no_decay_options));
  torch::optim::AdamW reference(std::move(groups), options);

  for (int step = 1; step <= 6; ++step) {
    const double lr = o.lr * step / 6.0;
    fused.set_lr(lr);
    for (auto& group : reference.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    drop_gradients(ours);
    reference.zero_grad();
    for (size_t i = 0; i < ours.size(); ++i) {
      const at::Tensor grad = at::randn(ours[i].sizes()) * (step % 2 ? 1.0 : 1e-3);
      ours[i].mutable_grad() = grad.clone();
      theirs[i].mutable_grad() = grad.clone();
    }
    fused.step();
    reference.step();
    for (size_t i = 0; i < ours.size(); ++i) {
      const double diff = (ours[i] - theirs[i]).abs().max().item<double>();
      const double scale = theirs[i].abs().max().item<double>();
      EXPECT_LE(diff, 4e-7 * scale) << "parameter " << i << " after step " << step;
    }
  }
  // The parameters really moved (about lr per step), so the comparison compared updates.
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_GT((ours[i] - inits[i]).abs().max().item<double>(), 5e-3) << i;
  EXPECT_DOUBLE_EQ(fused.groups()[0].weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(fused.groups()[1].weight_decay, 0.0);
  EXPECT_EQ(fused.groups()[0].params.size(), 2u);
  EXPECT_EQ(fused.groups()[1].steps[0].item<float>(), 6.0f);
}

// The sharded optimizer's targets: parameters cut into flat segments at
// multiples of 64 values (as train/grad_reducer.cpp aligns them), each with
// its own slice of the gradient, update the parameters exactly as
// whole-parameter targets do (AdamW is elementwise, and aligned cuts keep
// each value on the CPU kernel's vector or scalar path), and the
// checkpoint's lookup finds a parameter's first segment with its offset.
TEST(FusedAdamW, AlignedSegmentsOfParametersUpdateToTheBitAsTheWholeParameters) {
  OptimConfig o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  at::manual_seed(3);
  std::vector<at::Tensor> whole, cut, grads;
  std::vector<FusedAdamW::Target> targets;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cuts = {
      {{40, 7}, {0, 128, 192}}, {{203}, {0, 64}}, {{3, 4, 2}, {0}}};
  for (const auto& [shape, starts] : cuts) {
    const at::Tensor init = at::randn(shape);
    whole.push_back(init.clone().requires_grad_(true));
    cut.push_back(init.clone().requires_grad_(true));
    grads.push_back(at::zeros({init.numel()}));
    for (size_t k = 0; k < starts.size(); ++k) {
      const int64_t end = k + 1 < starts.size() ? starts[k + 1] : init.numel();
      targets.push_back({cut.back().detach().view({-1}).narrow(0, starts[k], end - starts[k]),
                         grads.back().narrow(0, starts[k], end - starts[k]), cut.back(), starts[k], init.dim() >= 2});
    }
  }
  FusedAdamW reference(whole, o), segmented(targets, o);
  for (int step = 1; step <= 4; ++step) {
    for (size_t i = 0; i < whole.size(); ++i) {
      const at::Tensor g = at::randn(whole[i].sizes());
      whole[i].mutable_grad() = g.clone();
      grads[i].copy_(g.reshape({-1}));
    }
    reference.step();
    segmented.step();
  }
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(at::equal(whole[i], cut[i])) << "parameter " << i << ": " << (whole[i] - cut[i]).abs().max().item<double>();
    const FusedAdamW::State s = segmented.state_of(cut[i]);
    EXPECT_EQ(s.offset, 0);
    EXPECT_TRUE(at::equal(s.exp_avg, reference.state_of(whole[i]).exp_avg.reshape({-1}).narrow(0, 0, s.exp_avg.numel())));
  }
  EXPECT_EQ(segmented.gradients().size(), 6u);
}

}  // namespace
}  // namespace hetpar
