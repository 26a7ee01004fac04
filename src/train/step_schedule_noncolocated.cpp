// The non-colocated schedule: encoder ranks and LLM ranks are disjoint, so
// the encoder runs ahead by up to `layout.run_ahead` micro-batches (posting
// its rows without waiting) and does each backward as its gradients arrive.
// With run_ahead = 1 the two halves alternate and each waits for the other.
// Under LLM PP the LLM ranks run the pipeline (step_schedule_pipeline.cpp)
// and its first stage takes the rows. Under encoder PP the encoder's stages
// run 1F1B among themselves, the last one run_ahead ahead of the LLM:
//
//   encoder pp 2, run_ahead 2, LLM pp 1, 4 micro-batches     time ->
//   enc stage 0   F0 F1 F2 .. .. B0 F3 B1 .. B2 .. B3
//   enc stage 1      F0 F1 .. B0 F2 B1 F3 B2 .. B3
//   llm              .. .. L0 .. L1 .. L2 .. L3
//   F/B: the encoder stage's forward/backward; L: the LLM's forward and
//   backward of a micro-batch (rows in, their gradients out); '..': waiting.
#include <ATen/ATen.h>

#include <algorithm>

#include "parallel/pipeline_schedule.hpp"
#include "train/boundary_rows.hpp"
#include "train/encoder_stage.hpp"
#include "train/micro_batch_route.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {
namespace {

// The encoder's stages form a pipeline whose last stage runs `run_ahead`
// micro-batches ahead of the LLM: 1F1B as if the LLM were run_ahead - 1 more
// stages after it (warm-ups of run_ahead - 1 on the last stage, one more on
// each stage before it).
at::Tensor encoder_side(const StepContext& ctx) {
  EncoderStage stage(ctx);
  const int stages = ctx.config.placement.encoder.pp;
  const int64_t ahead = std::min<int64_t>(ctx.config.layout.run_ahead, ctx.micro_batches);
  const int pipeline = stages + static_cast<int>(ahead) - 1;
  for (const PipelineOp& op : ops_to_run(ctx, one_f_one_b(pipeline, ctx.groups.encoder().coord().pp, ctx.micro_batches))) {
    if (op.kind == PipelineOp::kForward) stage.forward(op.micro);
    else stage.backward(op.micro);
  }
  stage.finish();
  return at::zeros({}, ctx.model.options(at::kDouble));  // the encoder reports no loss
}

// Without LLM PP: each micro-batch's rows, the LLM's forward and backward,
// their gradients back.
at::Tensor llm_side(const StepContext& ctx) {
  const RunConfig& c = ctx.config;
  BoundaryRows rows(ctx);
  at::Tensor loss_share;
  for (int64_t m = 0; m < ctx.micro_batches; ++m) {
    const MicroBatch batch = ctx.data.micro_batch(ctx.step, first_sample(c, ctx.groups.llm().coord().dp, m),
                                                  c.data.micro_batch_size, /*with_pixels=*/false);
    const at::Tensor share = llm_forward_backward(ctx, m, batch, rows.forward(m, batch));
    loss_share = loss_share.defined() ? loss_share + share : share;
    if (!ctx.forward_only) rows.backward(m);
  }
  rows.finish();
  return loss_share;
}

}  // namespace

at::Tensor run_noncolocated_micro_batches(const StepContext& ctx) {
  if (ctx.groups.encoder().active()) return encoder_side(ctx);
  if (ctx.config.placement.llm.pp == 1) return llm_side(ctx);
  BoundaryRows rows(ctx);
  return run_llm_pipeline(ctx, ctx.groups.llm().coord().pp == 0 ? &rows : nullptr);
}

}  // namespace hetpar
