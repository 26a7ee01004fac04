// The step-time model's memory half: each rank's peak memory for a run, by
// what holds it. Weights, gradients and AdamW moments are fp32 (16 bytes a
// trainable parameter, 4 a frozen one) on every device and precision (the
// trainer's mixed precision keeps fp32 weights), and in bf16 the step's bf16
// copies of the trainable weights the matmuls read (2 bytes); activations saved for the
// backward take `element_bytes` each (4 in fp32, 2 in bf16) but the fp32
// residual stream's and attention probabilities, times the
// micro-batches the schedule holds in flight on that rank; the logits and
// the loss's copies of them are fp32; the reserved part is the runtime's own
// (the process, its libraries and process group on CPU; the CUDA context and
// communicator buffers on a GPU). What depends on the device comes from the
// profile (MemoryAssumptions).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "plan/profile.hpp"

namespace hetpar {

struct RankMemory {
  std::string what;  // "llm stage 1", "encoder stage 0 + llm stage 0", ...
  int ranks = 0;     // ranks holding this much
  double state = 0;        // weights, gradients, optimizer moments; in bf16 the step's weight copies
  double activations = 0;  // saved for the backward, every micro-batch in flight
  double transient = 0;    // the largest short-lived part: the logits and their gradient (last LLM stage), or a recomputed layer's work
  double reserved = 0;     // the runtime's own
  // Gradients the state counts that do not exist yet at the activations'
  // peak: a module whose every micro-batch of the step is in flight at once
  // runs all its forwards before its first backward, and gradients are
  // dropped after each step (train/fused_adamw.hpp), so its peak comes with
  // none; the optimizer's moment (the whole state, no activations) may then
  // be the larger.
  double unmade_gradients = 0;
  int64_t micro_batches_in_flight = 0;  // the most this rank holds (its modules' largest)
  double total() const {
    return reserved + std::max(state, state - unmade_gradients + activations + transient);
  }
};

// Bytes a parameter holds on every device and precision: fp32 weight,
// gradient and two AdamW moments, or the weight alone when it is frozen.
// With the optimizer state sharded over a group of `shard_group` (> 1), a
// rank keeps its 1/shard_group of the moments and of the summed gradient
// (train/grad_reducer.hpp) beside the whole weight and, until its bucket is
// reduce-scattered, the whole unsummed gradient.
// The group a module's optimizer state is sharded over (1: not sharded):
// its gradients' reduction group `reduction_group`, with optim.shard_state.
inline int optimizer_shard_group(const RunConfig& c, int reduction_group) {
  return c.optim.shard_state ? reduction_group : 1;
}

inline double parameter_state_bytes(double parameters, bool trainable, int shard_group = 1) {
  if (!trainable) return parameters * 4;
  return parameters * (shard_group > 1 ? 8 + 12.0 / shard_group : 16);
}
// Of those, what a step makes and drops: the fp32 .grad, sharded or not (a
// sharded rank's kept share of the sum stays between steps).
inline double step_gradient_bytes(double parameters, bool trainable) { return trainable ? 4 * parameters : 0; }

struct MemoryAssumptions {
  double element_bytes = 4;   // an activation value
  double reserved_bytes = 0;  // a rank's runtime
  bool attention_keeps_probabilities = false;  // unfused grouped-query attention (CPU)
  bool norm_backward_unfused = false;          // RMSNorm's backward as separate ops (CPU)
  bool reduce_scatter_copies_input = false;    // the backend copies a reduce-scatter's input (Gloo)
  bool gemm_adds_into_fp32 = false;            // no bf16 weight gradients (tp/weight_grad.hpp; some GPUs)
};
MemoryAssumptions memory_assumptions(const Profile& profile);

// The images the model counts a sample: data.images_max, or fewer where
// data.files' image_counts say no sample holds more (data.files_most_images).
int64_t most_images_per_sample(const RunConfig& config);

// One entry per kind of rank (a module's pipeline stage; colocated and
// uniform ranks hold both modules), together covering every rank.
std::vector<RankMemory> rank_memory(const RunConfig& config, const MemoryAssumptions& assumptions);

// The entry with the largest total.
const RankMemory& fullest_rank(const std::vector<RankMemory>& ranks);

// Every rank's total summed (ranks that share one host's memory).
double all_ranks_bytes(const std::vector<RankMemory>& ranks);

}  // namespace hetpar
