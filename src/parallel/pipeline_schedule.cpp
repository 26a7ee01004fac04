#include "parallel/pipeline_schedule.hpp"

#include <algorithm>

namespace hetpar {

StageLayers stage_layers(int64_t layers, int stages, int stage) {
  const int64_t base = layers / stages, extra = layers % stages;
  return {stage * base + std::min<int64_t>(stage, extra), base + (stage < extra ? 1 : 0)};
}

int stage_of_layer(int64_t layers, int stages, int64_t layer) {
  for (int s = 0; s < stages; ++s) {
    const StageLayers r = stage_layers(layers, stages, s);
    if (layer < r.first + r.count) return s;
  }
  return stages - 1;
}

std::vector<PipelineOp> one_f_one_b(int stages, int stage, int64_t micro_batches) {
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, micro_batches);
  std::vector<PipelineOp> ops;
  for (int64_t i = 0; i < warmup; ++i) ops.push_back({PipelineOp::kForward, i});
  for (int64_t j = 0; j < micro_batches - warmup; ++j) {
    ops.push_back({PipelineOp::kForward, warmup + j});
    ops.push_back({PipelineOp::kBackward, j});
  }
  for (int64_t j = micro_batches - warmup; j < micro_batches; ++j) ops.push_back({PipelineOp::kBackward, j});
  return ops;
}

double one_f_one_b_bubble_fraction(int stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace hetpar
