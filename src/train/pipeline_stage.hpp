// One LLM rank's stage of the pipeline (layout.llm.pp > 1): runs its layers'
// forward or backward of one micro-batch when a schedule says so. Activations
// go to the same (tp, cp, dp) rank of the next stage and their gradients come
// back, point-to-point (sends in flight, receives blocking, waits timed as
// pipeline_wait). Stage 0 takes each micro-batch's image rows from an
// `ImageRows` source and gives their gradients back after its backward of
// that micro-batch; the last stage computes the loss.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <vector>

#include "train/step_schedule.hpp"

namespace hetpar {

class PipelineStage {
 public:
  // `rows` is used on the first stage's ranks only (may be null elsewhere).
  PipelineStage(const StepContext& ctx, ImageRows* rows);

  void forward(int64_t micro);
  void backward(int64_t micro);
  // Waits for the sends still in flight; returns this rank's share of the
  // step's loss (the last stage's TP rank 0 reports it, every other rank 0).
  at::Tensor finish();

 private:
  struct InFlight {
    MicroBatch batch;   // this rank's part
    at::Tensor input;   // later stages: the received activations, a stage input
    at::Tensor output;  // the activations sent on, or the loss (last stage)
  };

  const StepContext& ctx_;
  ImageRows* rows_;
  GridCoord coord_;
  int stages_;
  Group& cp_;
  std::map<int64_t, InFlight> in_flight_;
  std::vector<Group::Pending> sends_;
  at::Tensor loss_;
};

}  // namespace hetpar
