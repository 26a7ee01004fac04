// Colocated placement with LLM pipeline parallelism. The encoder's layout
// spans every rank of the job while the LLM's stages split them (stage s: the
// ranks at pp coordinate s). Every rank encodes its share of each micro-batch
// (E) and posts the rows to the first stage's ranks over the boundary's
// point-to-point halves (rows for itself stay local); stage 0 takes them at
// its forward of that micro-batch (F) and sends their gradients back after its
// backward (B); every rank then back-propagates its share (e). Where E and e
// go among a stage's 1F1B ops is `layout.encoder_schedule`:
//
//   bubble_fill, pp 2, 4 micro-batches, at most 3 in flight     time ->
//   stage 0   E0 F0 E1 F1 E2 .. B0 F2 e0 E3 B1 F3 B2 e1 B3 e2 e3
//   stage 1   E0 E1 F0 E2 B0 F1 B1 e0 E3 F2 B2 F3 B3 e1 e2 e3 ..
//
//   whole_step (the simple order): E0..E3, the stage's 1F1B, e0..e3
//   stage 0   E0 E1 E2 E3 F0 F1 .. B0 F2 B1 F3 B2 .. B3 e0 e1 e2 e3
//   stage 1   E0 E1 E2 E3 .. F0 B0 F1 B1 F2 B2 F3 B3 .. e0 e1 e2 e3
//
// '..': waiting. bubble_fill's orders come from simulating the step with each
// op's expected cost from its FLOPs (parallel/colocated_pipeline_schedule.hpp
// has the rules and a hand-worked timeline); every rank computes the same
// orders, so the blocking receives meet their sends in any real timing.
#include <ATen/ATen.h>

#include "metrics/model_flops.hpp"
#include "parallel/colocated_pipeline_schedule.hpp"
#include "train/boundary_rows.hpp"
#include "train/encoder_stage.hpp"
#include "train/pipeline_stage.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {
namespace {

// Expected cost of each op on one rank, in FLOPs: a stage's layers (its
// share under TP and CP; the head on the last), and each rank's share of one
// micro-batch's images through the encoder and projector.
StageCosts expected_costs(const RunConfig& c, int64_t micro_batches) {
  const Layout& llm = c.placement.llm;
  TransformerShape layer = llm_shape(c.llm);
  layer.layers = 1;
  const double per_layer = transformer_forward_flops(layer, c.data.micro_batch_size, c.llm.seq_len);
  const double head = 2.0 * c.data.micro_batch_size * c.llm.seq_len * c.llm.hidden * c.llm.vocab_size;
  StageCosts costs;
  for (int s = 0; s < llm.pp; ++s) {
    const double flops = (stage_layers(c.llm.layers, llm.pp, s).count * per_layer + (s == llm.pp - 1 ? head : 0)) /
                         (llm.tp * llm.cp);
    costs.forward.push_back(flops);
    costs.backward.push_back(2 * flops);
  }
  const double images = expected_images_per_step(c) / static_cast<double>(micro_batches);
  const double encoder = images * encoder_forward_flops_per_image(c.encoder) / c.placement.world_size;
  const double projector = images * projector_forward_flops_per_image(c.encoder, c.llm) / c.placement.world_size;
  costs.encoder_forward = encoder + projector;
  costs.encoder_backward = 2 * (projector + (c.encoder.frozen ? 0 : encoder));
  return costs;
}

}  // namespace

at::Tensor run_colocated_pipeline(const StepContext& ctx) {
  const int stage_index = ctx.groups.llm().coord().pp;
  const StageOrders orders =
      colocated_orders(ctx.config, ctx.micro_batches, expected_costs(ctx.config, ctx.micro_batches));
  EncoderStage encoder(ctx);  // this rank's share of the encoder, one stage of it
  BoundaryRows rows(ctx, &encoder);
  PipelineStage stage(ctx, stage_index == 0 ? &rows : nullptr);
  for (const PipelineOp& op : ops_to_run(ctx, orders[stage_index])) {
    switch (op.kind) {
      case PipelineOp::kEncoderForward: encoder.forward(op.micro); break;
      case PipelineOp::kForward: stage.forward(op.micro); break;
      case PipelineOp::kBackward: stage.backward(op.micro); break;
      case PipelineOp::kEncoderBackward: encoder.backward(op.micro); break;
    }
  }
  const at::Tensor loss = stage.finish();  // the first stage's gradient sends included
  encoder.finish();
  return loss;
}

}  // namespace hetpar
