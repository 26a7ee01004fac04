#include "train/partial_grad_sum.hpp"

#include <ATen/ATen.h>

#include "tp/partial_grads.hpp"

namespace hetpar {

PartialGradSum::PartialGradSum(std::vector<at::Tensor> partial, Group& tp, const GradReducer* reducer)
    : sharded_(reducer != nullptr && reducer->sharded()), tp_(tp) {
  for (at::Tensor& p : partial) {
    if (p.requires_grad()) params_.push_back(std::move(p));
  }
  if (sharded_) segments_ = reducer->segment_grads(params_);
}

void PartialGradSum::sum() {
  if (tp_.size() == 1 || params_.empty()) return;
  if (sharded_) {
    sum_over_group(segments_, tp_);
    return;
  }
  std::vector<at::Tensor> grads;
  for (at::Tensor& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    grads.push_back(p.grad());
  }
  sum_over_group(grads, tp_);
}

}  // namespace hetpar
