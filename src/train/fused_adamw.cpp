#include "train/fused_adamw.hpp"

#include <ATen/ATen.h>

namespace hetpar {
namespace {

std::vector<FusedAdamW::Target> whole_targets(const std::vector<at::Tensor>& params) {
  std::vector<FusedAdamW::Target> targets;
  for (const at::Tensor& p : params) targets.push_back(FusedAdamW::whole(p));
  return targets;
}

}  // namespace

FusedAdamW::FusedAdamW(const std::vector<at::Tensor>& params, const OptimConfig& o)
    : FusedAdamW(whole_targets(params), o) {}

FusedAdamW::FusedAdamW(const std::vector<Target>& targets, const OptimConfig& o)
    : lr_(o.lr), beta1_(o.beta1), beta2_(o.beta2), eps_(o.eps) {
  groups_.resize(2);
  groups_[0].weight_decay = o.weight_decay;  // matrices
  groups_[1].weight_decay = 0.0;             // norms and biases (1-d)
  for (const Target& t : targets) {
    Group& g = groups_[t.decays ? 0 : 1];
    g.params.push_back(t.values);
    g.grads.push_back(t.grad);
    g.owners.push_back(t.param);
    g.offsets.push_back(t.offset);
    g.exp_avg.push_back(at::zeros_like(t.values, at::MemoryFormat::Contiguous));
    g.exp_avg_sq.push_back(at::zeros_like(t.values, at::MemoryFormat::Contiguous));
    g.steps.push_back(at::zeros({}, t.values.options().dtype(at::kFloat)));
  }
}

FusedAdamW::State FusedAdamW::state_of(const at::Tensor& param) const {
  for (const Group& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (g.owners[i].is_same(param)) return {g.exp_avg[i], g.exp_avg_sq[i], g.steps[i], g.offsets[i]};
    }
  }
  return {};
}

const at::Tensor& FusedAdamW::grad_of(const Group& g, size_t i) const {
  return g.grads[i].defined() ? g.grads[i] : g.params[i].grad();
}

std::vector<at::Tensor> FusedAdamW::gradients() const {
  std::vector<at::Tensor> grads;
  for (const Group& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (grad_of(g, i).defined()) grads.push_back(grad_of(g, i));
    }
  }
  return grads;
}

void FusedAdamW::step() {
  at::NoGradGuard no_grad;
  for (Group& g : groups_) {
    std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, steps;
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!grad_of(g, i).defined()) continue;
      params.push_back(g.params[i]);
      grads.push_back(grad_of(g, i));
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

void drop_gradients(const std::vector<at::Tensor>& params) {
  for (const at::Tensor& p : params) p.mutable_grad().reset();
}

}  // namespace hetpar
