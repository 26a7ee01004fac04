// AdamW over all of a rank's parameters in two calls of ATen's fused kernel
// (one for the matrices, which decay, one for norms and biases, which do
// not), instead of a loop of a dozen tensor ops per parameter. The update
// is torch::optim::AdamW's to fp32 rounding (the kernel forms the first
// moment with a lerp); the state is plain tensors a checkpoint can hold.
// With the optimizer state sharded (train/grad_reducer.hpp) a target is the
// segment of a parameter this rank updates, with its part of the summed
// gradient: AdamW is elementwise, so a segment's update is the whole
// parameter's to the bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "config/run_config.hpp"

namespace hetpar {

class FusedAdamW {
 public:
  struct Target {
    at::Tensor values;  // the parameter, or a flat view of a segment of it
    at::Tensor grad;    // the segment's gradient; undefined: the parameter's own .grad
    at::Tensor param;   // the parameter `values` belongs to (checkpoints find the state by it)
    int64_t offset = 0; // of `values` in the parameter's flattened values
    bool decays = false;
  };
  // Each parameter whole, with its .grad; matrices decay.
  FusedAdamW(const std::vector<at::Tensor>& params, const OptimConfig& optim);
  explicit FusedAdamW(const std::vector<Target>& targets, const OptimConfig& optim);
  // A parameter as its own target: matrices decay.
  static Target whole(const at::Tensor& param) { return {param, at::Tensor(), param, 0, param.dim() >= 2}; }

  void set_lr(double lr) { lr_ = lr; }
  void step();  // targets without a gradient are left as they are
  // The gradients step() would read now (for the norm's clipping).
  std::vector<at::Tensor> gradients() const;

  struct Group {
    std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, steps;  // steps: one fp32 scalar per target
    std::vector<at::Tensor> owners;
    std::vector<int64_t> offsets;
    double weight_decay = 0;
  };
  const std::vector<Group>& groups() const { return groups_; }

  // The state of one parameter's target (views of the optimizer's own
  // tensors, so a checkpoint can fill them in place; `offset` where they
  // begin in the parameter's flattened values); all undefined for a parameter
  // this optimizer does not update here (a frozen one, or a segment another
  // rank updates).
  struct State {
    at::Tensor exp_avg, exp_avg_sq, step;
    int64_t offset = 0;
  };
  State state_of(const at::Tensor& param) const;

 private:
  const at::Tensor& grad_of(const Group& g, size_t i) const;
  std::vector<Group> groups_;
  double lr_, beta1_, beta2_, eps_;
};

// Drops the parameters' gradients (the next backward allocates them).
void drop_gradients(const std::vector<at::Tensor>& params);

}  // namespace hetpar
