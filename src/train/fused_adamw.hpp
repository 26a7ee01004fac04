// AdamW over all of a rank's parameters in two calls of ATen's fused kernel
// (one for the matrices, which decay, one for norms and biases, which do
// not), instead of a loop of a dozen tensor ops per parameter. The update
// is torch::optim::AdamW's to fp32 rounding (the kernel forms the first
// moment with a lerp); the state is plain tensors a checkpoint can hold.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "config/run_config.hpp"

namespace hetpar {

class FusedAdamW {
 public:
  FusedAdamW(const std::vector<at::Tensor>& params, const OptimConfig& optim);

  void set_lr(double lr) { lr_ = lr; }
  void zero_grad();  // drops the gradients (they are reallocated by the next backward)
  void step();       // parameters without a gradient are left as they are

  struct Group {
    std::vector<at::Tensor> params, exp_avg, exp_avg_sq, steps;  // steps: one fp32 scalar per parameter
    double weight_decay = 0;
  };
  const std::vector<Group>& groups() const { return groups_; }

  // The state of one parameter (views of the optimizer's own tensors, so a
  // checkpoint can fill them in place); all undefined for a parameter this
  // optimizer does not update (a frozen one).
  struct State {
    at::Tensor exp_avg, exp_avg_sq, step;
  };
  State state_of(const at::Tensor& param) const;

 private:
  std::vector<Group> groups_;
  double lr_, beta1_, beta2_, eps_;
};

}  // namespace hetpar
