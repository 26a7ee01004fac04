// Which sample goes where in one micro-batch of a step: the samples of every
// LLM DP rank, the boundary plan every rank derives from their metadata, and
// the images the plan gives this rank's encoder DP group.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "boundary/routing_plan.hpp"
#include "data/batch_source.hpp"

namespace hetpar {

// The first sample of micro-batch `micro` on LLM DP rank `dp_rank`: rank d
// takes samples d * samples_per_rank + micro * micro_batch_size + [0, mbs).
int64_t first_sample(const RunConfig& config, int64_t dp_rank, int64_t micro);

struct MicroBatchRoute {
  std::vector<int64_t> samples;   // plan sample index -> sample of the step
  std::vector<SampleText> texts;  // of those samples
  BoundaryPlan plan;
};

// Every rank computes the same route from the (cheap) text of every sample.
MicroBatchRoute route_micro_batch(const BatchSource& data, const RunConfig& config, int64_t step, int64_t micro);

// Pixels [K, C, H, W] of the images the plan gives encoder DP group
// `encoder_dp`, in plan order (K may be 0).
at::Tensor assigned_images(const BatchSource& data, const RunConfig& config, const MicroBatchRoute& route,
                           int encoder_dp, int64_t step);

}  // namespace hetpar
