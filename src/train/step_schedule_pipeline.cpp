// The LLM pipeline (layout.llm.pp > 1). Each LLM rank runs its stage's
// layers in the 1F1B order (parallel/pipeline_schedule.hpp); activations go
// to the same (tp, cp, dp) rank of the next stage and their gradients come
// back, point-to-point (sends in flight, receives blocking). Stage 0 gets the
// image rows of each micro-batch from an `ImageRows` source — the encoder on
// its own ranks (uniform) or the boundary from the encoder ranks running
// ahead (non-colocated) — and gives their gradients back after its backward
// of that micro-batch. The last stage computes the loss.
//
//   uniform, pp 2, 4 micro-batches            time ->
//   stage 0   E0 F0 E1 F1 .. B0 e0 E2 F2 B1 e1 E3 F3 B2 e2 .. B3 e3
//   stage 1         .. F0 B0 .. F1 B1 .. F2 B2 .. F3 B3
//   E/e: encoder forward/backward, F/B: the stage's LLM forward/backward,
//   '..': waiting on the other stage (the bubble, timed as pipeline_wait).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <map>

#include "parallel/pipeline_schedule.hpp"
#include "train/micro_batch_route.hpp"
#include "train/sequence_part.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {
namespace {

// Apart from the boundary's tags (2m, 2m + 1) on the same world group.
int activation_tag(int64_t micro) { return static_cast<int>((1 << 24) + 2 * micro); }
int gradient_tag(int64_t micro) { return static_cast<int>((1 << 24) + 2 * micro + 1); }

class PipelineStage {
 public:
  PipelineStage(const StepContext& ctx, ImageRows* rows)
      : ctx_(ctx), rows_(rows), coord_(ctx.groups.llm().coord()), stages_(ctx.config.placement.llm.pp),
        cp_(ctx.groups.llm().get(GroupKind::kCp)) {}

  void forward(int64_t micro) {
    const RunConfig& c = ctx_.config;
    const bool first = coord_.pp == 0, last = coord_.pp == stages_ - 1;
    const MicroBatch whole = ctx_.data.micro_batch(ctx_.step, first_sample(c, coord_.dp, micro),
                                                   c.data.micro_batch_size, first && rows_->needs_pixels());
    InFlight& f = in_flight_[micro];
    f.batch = cp_.size() > 1 ? sequence_part(whole, cp_) : whole;
    at::Tensor image_rows, hidden;
    if (first) {
      image_rows = rows_->forward(micro, whole);
    } else {
      auto timed = ctx_.timer.measure(Phase::kPipelineWait);
      at::Tensor h = at::empty({f.batch.ids.size(0), f.batch.ids.size(1), c.llm.hidden}, at::kFloat);
      ctx_.world.recv(h, peer(-1), activation_tag(micro));
      f.input = hidden = h.requires_grad_(true);
    }
    auto timed = ctx_.timer.measure(Phase::kLlmForward);
    const at::Tensor out = ctx_.model.llm_stage(f.batch.ids, image_rows, f.batch.image_mask, hidden);
    if (last) {
      f.output = ctx_.model.llm->loss_sum(out, f.batch.targets) / ctx_.target_tokens;
      if (coord_.tp == 0) loss_ = loss_ + f.output.detach().to(at::kDouble);
    } else {
      f.output = out;
      sends_.push_back(ctx_.world.isend(out.detach().to(at::kFloat).contiguous(), peer(+1), activation_tag(micro)));
    }
  }

  void backward(int64_t micro) {
    const bool first = coord_.pp == 0, last = coord_.pp == stages_ - 1;
    InFlight& f = in_flight_.at(micro);
    if (last) {
      auto timed = ctx_.timer.measure(Phase::kLlmBackward);
      f.output.backward();
    } else {
      at::Tensor grad = at::empty(f.output.sizes(), at::kFloat);
      {
        auto timed = ctx_.timer.measure(Phase::kPipelineWait);
        ctx_.world.recv(grad, peer(+1), gradient_tag(micro));
      }
      auto timed = ctx_.timer.measure(Phase::kLlmBackward);
      backward_if_graph(f.output, grad.to(f.output.scalar_type()));
    }
    if (first) {
      rows_->backward(micro);
    } else {
      sends_.push_back(ctx_.world.isend(grad_or_zeros(f.input).contiguous(), peer(-1), gradient_tag(micro)));
    }
    in_flight_.erase(micro);
  }

  at::Tensor finish() {
    auto timed = ctx_.timer.measure(Phase::kPipelineWait);
    for (Group::Pending& p : sends_) p.wait();
    sends_.clear();
    if (rows_ != nullptr && coord_.pp == 0) rows_->finish();
    return loss_;
  }

 private:
  struct InFlight {
    MicroBatch batch;   // this rank's part
    at::Tensor input;   // later stages: the received activations, a stage input
    at::Tensor output;  // the activations sent on, or the loss (last stage)
  };

  // The job rank of the same (tp, cp, dp) coordinates `step` stages on.
  int peer(int step) const {
    GridCoord c = coord_;
    c.pp += step;
    return ctx_.groups.llm().grid().rank(c);
  }

  const StepContext& ctx_;
  ImageRows* rows_;  // stage 0 only
  GridCoord coord_;
  int stages_;
  Group& cp_;
  std::map<int64_t, InFlight> in_flight_;
  std::vector<Group::Pending> sends_;
  at::Tensor loss_ = at::zeros({}, at::kDouble);
};

// Uniform: the first stage's ranks encode their micro-batch's images (all of
// them under CP, keeping the rows of their own positions).
class EncoderRows : public ImageRows {
 public:
  explicit EncoderRows(const StepContext& ctx) : ctx_(ctx), cp_(ctx.groups.llm().get(GroupKind::kCp)) {}
  bool needs_pixels() const override { return true; }
  at::Tensor forward(int64_t micro, const MicroBatch& whole) override {
    InFlight& f = in_flight_[micro];
    {
      auto timed = ctx_.timer.measure(Phase::kEncoderForward);
      f.rows = ctx_.model.encode(whole.pixels);
    }
    f.input = f.rows.detach().requires_grad_(true);
    return cp_.size() > 1 ? image_rows_of_part(f.input, whole.image_mask, cp_) : f.input;
  }
  void backward(int64_t micro) override {
    InFlight& f = in_flight_.at(micro);
    {
      auto timed = ctx_.timer.measure(Phase::kEncoderBackward);
      backward_if_graph(f.rows, grad_or_zeros(f.input));
    }
    in_flight_.erase(micro);
  }

 private:
  struct InFlight {
    at::Tensor rows;   // with the encoder's graph
    at::Tensor input;  // the LLM's stage input
  };
  const StepContext& ctx_;
  Group& cp_;
  std::map<int64_t, InFlight> in_flight_;
};

}  // namespace

at::Tensor run_uniform_pipeline(const StepContext& ctx) {
  EncoderRows rows(ctx);
  return run_llm_pipeline(ctx, ctx.groups.encoder().active() ? &rows : nullptr);
}

at::Tensor run_llm_pipeline(const StepContext& ctx, ImageRows* stage0_rows) {
  PipelineStage stage(ctx, stage0_rows);
  const GridCoord coord = ctx.groups.llm().coord();
  for (const PipelineOp& op : one_f_one_b(ctx.config.placement.llm.pp, coord.pp, ctx.micro_batches)) {
    if (op.kind == PipelineOp::kForward) stage.forward(op.micro);
    else stage.backward(op.micro);
  }
  return stage.finish();
}

}  // namespace hetpar
