// The global gradient norm, clipping and the learning-rate schedule (the
// gradients' sum over data-parallel replicas: train/grad_reducer.hpp).
#pragma once

#include <vector>

#include "dist/group.hpp"
#include "train/grad_reducer.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

// What one module on this rank adds to the global squared norm. After the
// DP x CP reduction replicas hold equal gradients, so only the first (DP and
// CP coordinates 0) counts; replicated parameters count on TP rank 0 only.
// With the optimizer state sharded each member holds a different part of the
// sum (its segments): every member counts its own.
struct NormShare {
  const MultimodalModel::ParameterSets* params;
  bool dp_first;  // dp == 0 and cp == 0
  bool tp_first;
  const GradReducer* sharded = nullptr;  // the module's reducer when it shards
};

// sqrt of the sum over the whole job; `world` spans every rank.
// As a 1-element double tensor on `device`: read back after the step's work,
// so that computing and applying it never blocks the host.
at::Tensor global_grad_norm(Group& world, const std::vector<NormShare>& shares, const at::Device& device);

// Scales every gradient by max_norm / norm when norm exceeds it (max_norm > 0).
// The factor is computed where the gradients are (no read of the norm).
void clip_gradients(const std::vector<at::Tensor>& grads, const at::Tensor& norm, double max_norm);

// Linear warm-up from 0 to lr over warmup_steps, then cosine down to min_lr at
// total_steps. Steps count from 1.
double learning_rate(const OptimConfig& optim, int64_t step, int64_t total_steps);

}  // namespace hetpar
