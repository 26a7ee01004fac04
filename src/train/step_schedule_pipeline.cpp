// The LLM pipeline (layout.llm.pp > 1) under uniform and non-colocated
// placement: each LLM rank runs its stage (train/pipeline_stage.hpp) in the
// 1F1B order (parallel/pipeline_schedule.hpp). Stage 0 gets the image rows of
// each micro-batch from an `ImageRows` source — the encoder on its own ranks
// (uniform) or the boundary from the encoder ranks running ahead
// (non-colocated) — and gives their gradients back after its backward of that
// micro-batch. Colocated: step_schedule_colocated_pipeline.cpp.
//
//   uniform, pp 2, 4 micro-batches            time ->
//   stage 0   E0 F0 E1 F1 .. B0 e0 E2 F2 B1 e1 E3 F3 B2 e2 .. B3 e3
//   stage 1         .. F0 B0 .. F1 B1 .. F2 B2 .. F3 B3
//   E/e: encoder forward/backward, F/B: the stage's LLM forward/backward,
//   '..': waiting on the other stage (the bubble, timed as pipeline_wait).
#include <ATen/ATen.h>
#include <map>

#include "parallel/pipeline_schedule.hpp"
#include "train/pipeline_stage.hpp"
#include "train/sequence_part.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {
namespace {

// Uniform: the first stage's ranks encode their micro-batch's images (all of
// them under CP or SP, keeping the rows of their own positions).
class EncoderRows : public ImageRows {
 public:
  explicit EncoderRows(const StepContext& ctx)
      : ctx_(ctx), cp_(ctx.groups.llm().get(GroupKind::kCp)), tp_(ctx.groups.llm().get(GroupKind::kTp)) {}
  bool needs_pixels() const override { return true; }
  at::Tensor forward(int64_t micro, const MicroBatch& whole) override {
    InFlight& f = in_flight_[micro];
    {
      auto timed = ctx_.timer.measure(Phase::kEncoderForward);
      f.rows = ctx_.model.encode(whole.pixels);
    }
    f.input = f.rows.detach().requires_grad_(true);
    const at::Tensor rows = own_image_rows(f.input, whole.image_mask_host, cp_, tp_, ctx_.config.placement.llm.sp);
    if (ctx_.forward_only) in_flight_.erase(micro);  // no backward will come for them
    return rows;
  }
  void backward(int64_t micro) override {
    InFlight& f = in_flight_.at(micro);
    {
      auto timed = ctx_.timer.measure(Phase::kEncoderBackward);
      before_encoder_backward(ctx_, micro);
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
  Group& tp_;
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
  for (const PipelineOp& op : ops_to_run(ctx, one_f_one_b(ctx.config.placement.llm.pp, coord.pp, ctx.micro_batches))) {
    if (op.kind == PipelineOp::kForward) stage.forward(op.micro);
    else stage.backward(op.micro);
  }
  return stage.finish();
}

}  // namespace hetpar
