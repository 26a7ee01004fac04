#include "train/grad_sync.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace hetpar {
namespace {

std::vector<at::Tensor> defined_grads(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

// Sum of the squared norms, as a 0-d double tensor where the gradients
// live: one multi-tensor kernel, no read back to the host.
at::Tensor squared_norm(const std::vector<at::Tensor>& grads, const at::Device& device) {
  if (grads.empty()) return at::zeros({}, at::TensorOptions(at::kDouble).device(device));
  return at::stack(at::_foreach_norm(grads, 2)).to(at::kDouble).square().sum();
}

}  // namespace

at::Tensor global_grad_norm(Group& world, const std::vector<NormShare>& shares, const at::Device& device) {
  at::Tensor total = at::zeros({1}, at::TensorOptions(at::kDouble).device(device));
  for (const NormShare& s : shares) {
    if (s.sharded != nullptr) {  // this member's segments, of parameters split over TP and replicated
      total += squared_norm(s.sharded->segment_grads(s.params->sharded), device);
      if (s.tp_first) total += squared_norm(s.sharded->segment_grads(s.params->replicated), device);
      continue;
    }
    if (!s.dp_first) continue;
    total += squared_norm(defined_grads(s.params->sharded), device);
    if (s.tp_first) total += squared_norm(defined_grads(s.params->replicated), device);
  }
  world.all_reduce(total);
  return total.sqrt_();
}

void clip_gradients(const std::vector<at::Tensor>& grads, const at::Tensor& norm, double max_norm) {
  if (max_norm <= 0 || grads.empty()) return;
  // max_norm / (norm + 1e-6) where the norm exceeds max_norm, else exactly 1.
  const at::Tensor factor = at::where(norm > max_norm, max_norm / (norm + 1e-6), at::ones_like(norm));
  at::_foreach_mul_(grads, factor.to(grads[0].scalar_type()).squeeze());
}

double learning_rate(const OptimConfig& o, int64_t step, int64_t total_steps) {
  if (step <= o.warmup_steps) return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(total_steps - o.warmup_steps, 1);
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps));
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace hetpar
