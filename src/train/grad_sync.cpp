#include "train/grad_sync.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace hetpar {
namespace {

void reduce_bucket(std::vector<at::Tensor>& grads, Group& dp) {
  if (grads.empty()) return;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
  at::Tensor bucket = at::cat(flat);
  dp.all_reduce(bucket);
  int64_t at = 0;
  for (at::Tensor& g : grads) {
    g.copy_(bucket.narrow(0, at, g.numel()).view_as(g));
    at += g.numel();
  }
  grads.clear();
}

double squared_norm(const std::vector<at::Tensor>& params) {
  double sum = 0;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) sum += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  return sum;
}

}  // namespace

void all_reduce_gradients(const std::vector<at::Tensor>& params, Group& dp, int64_t bucket_bytes) {
  if (dp.size() == 1) return;
  std::vector<at::Tensor> bucket;
  int64_t bytes = 0;
  for (const at::Tensor& p : params) {
    at::Tensor g = p.mutable_grad();
    if (!g.defined()) g = p.mutable_grad() = at::zeros_like(p);  // every replica sends the same layout
    if (bytes + g.nbytes() > static_cast<size_t>(bucket_bytes)) {
      reduce_bucket(bucket, dp);
      bytes = 0;
    }
    bucket.push_back(g);
    bytes += static_cast<int64_t>(g.nbytes());
  }
  reduce_bucket(bucket, dp);
}

double global_grad_norm(Group& world, const std::vector<NormShare>& shares) {
  double local = 0;
  for (const NormShare& s : shares) {
    if (!s.dp_first) continue;
    local += squared_norm(s.params->sharded);
    if (s.tp_first) local += squared_norm(s.params->replicated);
  }
  at::Tensor total = at::full({1}, local, at::kDouble);
  world.all_reduce(total);
  return std::sqrt(total.item<double>());
}

void clip_gradients(const std::vector<at::Tensor>& params, double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return;
  const double scale = max_norm / (norm + 1e-6);
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) p.grad().mul_(scale);
  }
}

double learning_rate(const OptimConfig& o, int64_t step, int64_t total_steps) {
  if (step <= o.warmup_steps) return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(total_steps - o.warmup_steps, 1);
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps));
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace hetpar
