// One encoder rank's part of a step when the encoder runs on its own
// schedule (non-colocated, or colocated beside a pipelined LLM): the forward
// or backward of one micro-batch's images (those the boundary plan gives its
// DP group) through the layers it holds. Pipelined (layout.encoder.pp > 1,
// non-colocated), activations go to the same (tp, dp) rank of the next stage
// and their gradients come back, point-to-point; the last stage (the only one
// without PP) posts the projected rows over the boundary's point-to-point
// halves and back-propagates the gradients that come back.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <vector>

#include "boundary/boundary_exchange.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {

class EncoderStage {
 public:
  explicit EncoderStage(const StepContext& ctx);

  void forward(int64_t micro);
  void backward(int64_t micro);
  void finish();  // waits for the sends still in flight
  // The last stage's exchange of a micro-batch between its forward and
  // backward: a colocated rank's LLM side receives its own rows through it.
  BoundaryExchange& exchange(int64_t micro);

 private:
  struct InFlight {
    std::unique_ptr<BoundaryExchange> exchange;  // last stage only
    int64_t images = 0;  // this DP group's images in the micro-batch
    at::Tensor input;    // later stages: the received activations, a stage input
    at::Tensor output;   // the activations sent on, or the rows posted (last stage)
  };

  const StepContext& ctx_;
  GridCoord coord_;
  int stages_;
  bool trains_;  // the encoder is not frozen: gradients flow between its stages
  std::map<int64_t, InFlight> in_flight_;
  // Each micro-batch's forward sends, held until its gradient comes back
  // (its receivers have taken them by then), not to the step's end: a send
  // holds a copy of the rows. Gradient sends wait in sends_ until finish().
  std::map<int64_t, std::vector<Group::Pending>> forward_sends_;
  std::vector<Group::Pending> sends_;
};

}  // namespace hetpar
