// The LLM side of the boundary's point-to-point halves: each micro-batch's
// image rows received at this rank's positions, and their gradients sent back
// after the LLM's backward of that micro-batch. Non-colocated, it makes each
// micro-batch's exchange; colocated beside a pipelined LLM, the rank's own
// encoder share made it already (every rank encodes a micro-batch before the
// first stage takes it) and lends it, so the rows a rank sent itself are there.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <vector>

#include "boundary/boundary_exchange.hpp"
#include "train/encoder_stage.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {

class BoundaryRows : public ImageRows {
 public:
  // `encoder`: this rank's encoder, whose exchanges the rows come through (colocated); null: make them.
  explicit BoundaryRows(const StepContext& ctx, EncoderStage* encoder = nullptr) : ctx_(ctx), encoder_(encoder) {}
  bool needs_pixels() const override { return false; }
  at::Tensor forward(int64_t micro, const MicroBatch& whole) override;
  void backward(int64_t micro) override;
  void finish() override;

 private:
  struct InFlight {
    std::unique_ptr<BoundaryExchange> own;  // non-colocated
    at::Tensor rows;                        // the LLM's input: its gradient goes back
  };
  BoundaryExchange& exchange(int64_t micro);

  const StepContext& ctx_;
  EncoderStage* encoder_;
  std::map<int64_t, InFlight> in_flight_;
  std::vector<Group::Pending> sends_;
};

}  // namespace hetpar
