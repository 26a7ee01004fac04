#include "train/fused_adamw.hpp"

#include <ATen/ATen.h>

namespace hetpar {

FusedAdamW::FusedAdamW(const std::vector<at::Tensor>& params, const OptimConfig& o)
    : lr_(o.lr), beta1_(o.beta1), beta2_(o.beta2), eps_(o.eps) {
  groups_.resize(2);
  groups_[0].weight_decay = o.weight_decay;  // matrices
  groups_[1].weight_decay = 0.0;             // norms and biases (1-d)
  for (const at::Tensor& p : params) {
    Group& g = groups_[p.dim() >= 2 ? 0 : 1];
    g.params.push_back(p);
    g.exp_avg.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    g.exp_avg_sq.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    g.steps.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
  }
}

FusedAdamW::State FusedAdamW::state_of(const at::Tensor& param) const {
  for (const Group& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (g.params[i].is_same(param)) return {g.exp_avg[i], g.exp_avg_sq[i], g.steps[i]};
    }
  }
  return {};
}

void FusedAdamW::zero_grad() {
  for (Group& g : groups_) {
    for (at::Tensor& p : g.params) p.mutable_grad().reset();
  }
}

void FusedAdamW::step() {
  at::NoGradGuard no_grad;
  for (Group& g : groups_) {
    std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, steps;
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!g.params[i].grad().defined()) continue;
      params.push_back(g.params[i]);
      grads.push_back(g.params[i].grad());
      exp_avg.push_back(g.exp_avg[i]);
      exp_avg_sq.push_back(g.exp_avg_sq[i]);
      steps.push_back(g.steps[i]);
    }
    if (params.empty()) continue;
    // The kernel reads the step count for its bias correction; counting is ours.
    at::_foreach_add_(steps, 1);
    at::_fused_adamw_(params, grads, exp_avg, exp_avg_sq, /*max_exp_avg_sqs=*/{}, steps, lr_, beta1_, beta2_,
                      g.weight_decay, eps_, /*amsgrad=*/false, /*maximize=*/false);
  }
}

}  // namespace hetpar
