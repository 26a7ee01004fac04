// One micro-batch through encoder -> boundary -> LLM for the heterogeneous
// placements: the encoder ranks encode the images the routing plan gives
// their DP group, the boundary moves the rows to the LLM ranks that need them,
// and the backward flows the same way back. Colocated: every rank does both
// halves. Non-colocated: each rank does its own half; both halves take part in
// the boundary's forward and backward in the same order.
#pragma once

#include "data/synthetic_data.hpp"
#include "dist/module_groups.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

// The first sample of micro-batch `micro` on LLM DP rank `dp_rank`: rank d
// takes samples d * samples_per_rank + micro * micro_batch_size + [0, mbs).
int64_t first_sample(const RunConfig& config, int64_t dp_rank, int64_t micro);
// The step's micro-batch `micro` across every LLM DP rank, as the boundary
// plan numbers its samples: plan sample index -> sample of the step.
std::vector<int64_t> micro_batch_samples(const RunConfig& config, int64_t micro);

// Runs forward and backward; gradients accumulate in the model. Returns this
// rank's share of the loss (the LLM's TP rank 0 of each replica reports it;
// elsewhere 0), already divided by `target_tokens`.
double boundary_micro_batch(MultimodalModel& model, const SyntheticData& data, const RunConfig& config,
                            JobGroups& groups, Group& world, int64_t step, int64_t micro, double target_tokens);

}  // namespace hetpar
