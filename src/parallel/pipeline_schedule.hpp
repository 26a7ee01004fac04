// Pipeline parallelism's two pure rules, with no tensors in them: which
// layers each stage holds, and the 1F1B order in which a stage runs its
// micro-batches. For stage s of p with m micro-batches (m >= p):
//
//   warm-up   p - s - 1 forwards            F0 F1 ...
//   steady    one forward, one backward     F(w+j) B(j) ...
//   cool-down the backwards left            ... B(m-1)
//
//   p = 2, m = 4      time ->
//   stage 0   F0 F1 B0 F2 B1 F3 B2 B3
//   stage 1      F0 B0 F1 B1 F2 B2 F3 B3
//
// A stage holds at most p - s micro-batches' activations at once (the
// warm-up's, plus one), not m; the idle time at either end, the bubble, is
// (p - 1) / (m + p - 1) of the step when every stage takes equal time.
#pragma once

#include <cstdint>
#include <vector>

namespace hetpar {

// Layers [first, first + count) of stage `stage`: contiguous, in order, the
// first `layers % stages` stages one layer more than the rest.
struct StageLayers {
  int64_t first = 0;
  int64_t count = 0;
  bool operator==(const StageLayers&) const = default;
};
StageLayers stage_layers(int64_t layers, int stages, int stage);

// The stage holding layer `layer`.
int stage_of_layer(int64_t layers, int stages, int64_t layer);

// One unit of a stage's work on one micro-batch: the stage's forward or
// backward, or (colocated encoder, colocated_pipeline_schedule.hpp) this
// rank's share of the encoder's forward or backward.
struct PipelineOp {
  enum Kind { kForward, kBackward, kEncoderForward, kEncoderBackward } kind;
  int64_t micro = 0;
  bool operator==(const PipelineOp&) const = default;
};

// Stage `stage`'s order of forwards and backwards for one step (1F1B).
std::vector<PipelineOp> one_f_one_b(int stages, int stage, int64_t micro_batches);

// The 1F1B bubble's share of a step with equal stages: (p - 1) / (m + p - 1).
double one_f_one_b_bubble_fraction(int stages, int64_t micro_batches);

}  // namespace hetpar
