#include "train/step_schedule.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <optional>

#include "boundary/boundary_exchange.hpp"
#include "tp/weight_cast.hpp"
#include "train/micro_batch_route.hpp"
#include "train/sequence_part.hpp"

namespace hetpar {
namespace {

// A detached copy that starts a new graph: the backward then stops here and
// leaves the gradient in .grad() for the next stage.
at::Tensor stage_input(const at::Tensor& t) { return t.detach().requires_grad_(true); }

// One micro-batch, uniform or colocated: every rank runs both modules.
at::Tensor sequential_micro_batch(const StepContext& ctx, int64_t micro) {
  const RunConfig& c = ctx.config;
  ModuleGroups& llm = ctx.groups.llm();
  const bool uniform = c.placement.placement == Placement::Uniform;
  // Colocated, the encoder's images come by the routing plan: the LLM's batch needs only its text.
  const MicroBatch batch =
      ctx.data.micro_batch(ctx.step, first_sample(c, llm.coord().dp, micro), c.data.micro_batch_size, uniform);

  // Uniform: this rank encodes its own samples' images and needs no boundary.
  std::optional<MicroBatchRoute> route;
  std::optional<BoundaryExchange> exchange;
  at::Tensor pixels = batch.pixels;
  if (!uniform) {
    route = route_micro_batch(ctx.data, c, ctx.step, micro);
    const int encoder_dp = ctx.groups.encoder().coord().dp;
    exchange.emplace(route->plan, c.encoder.tokens_per_image(), ctx.world, encoder_dp);
    pixels = assigned_images(ctx.data, c, *route, encoder_dp, ctx.step);
  }
  at::Tensor rows;
  {
    auto timed = ctx.timer.measure(Phase::kEncoderForward);
    rows = ctx.model.encode(pixels);
  }
  const at::Tensor rows_in = stage_input(rows);
  at::Tensor arrived = rows_in;
  if (exchange) {
    auto timed = ctx.timer.measure(Phase::kBoundaryForward);
    arrived = exchange->forward(rows_in);
  }
  const at::Tensor arrived_in = exchange ? stage_input(arrived) : rows_in;
  // Uniform under LLM CP or SP: every CP rank encoded the micro-batch's images
  // (the encoder knows neither) and keeps the rows of its own positions.
  const at::Tensor llm_rows =
      uniform ? own_image_rows(rows_in, batch.image_mask_host, llm.get(GroupKind::kCp), llm.get(GroupKind::kTp),
                               c.placement.llm.sp)
              : arrived_in;
  const at::Tensor loss_share = llm_forward_backward(ctx, micro, batch, llm_rows);
  if (ctx.forward_only) return loss_share;
  if (exchange) {  // a collective: every rank takes part, rows or not
    auto timed = ctx.timer.measure(Phase::kBoundaryBackward);
    torch::autograd::backward({arrived}, {grad_or_zeros(arrived_in)});
  }
  {
    auto timed = ctx.timer.measure(Phase::kEncoderBackward);
    before_encoder_backward(ctx, micro);
    backward_if_graph(rows, grad_or_zeros(rows_in));
  }
  return loss_share;
}

}  // namespace

void before_llm_backward(const StepContext& ctx, int64_t micro) {
  if (ctx.reductions.llm != nullptr && micro == ctx.micro_batches - 1) ctx.reductions.llm->arm();
}

void before_encoder_backward(const StepContext& ctx, int64_t micro) {
  if (ctx.reductions.encoder != nullptr && micro == ctx.micro_batches - 1) ctx.reductions.encoder->arm();
}

at::Tensor llm_forward_backward(const StepContext& ctx, int64_t micro, const MicroBatch& whole, const at::Tensor& rows) {
  Group& cp = ctx.groups.llm().get(GroupKind::kCp);
  const MicroBatch batch = cp.size() > 1 ? sequence_part(whole, cp) : whole;
  at::Tensor loss;
  {
    auto timed = ctx.timer.measure(Phase::kLlmForward);
    const at::Tensor logits = ctx.model.llm_logits(batch.ids, rows, batch.image_mask);
    loss = ctx.model.llm->loss_sum(logits, batch.targets) / ctx.target_tokens;
  }
  if (!ctx.forward_only) {
    auto timed = ctx.timer.measure(Phase::kLlmBackward);
    before_llm_backward(ctx, micro);
    loss.backward();
  }
  // TP peers hold the same loss: one of them reports it (each CP rank its part's).
  // Summed in double over the micro-batches, as the step's loss always was.
  return ctx.groups.llm().coord().tp == 0 ? loss.detach().to(at::kDouble) : at::zeros({}, loss.options().dtype(at::kDouble));
}

Group& p2p_group(const StepContext& ctx, Channel channel, bool gradient) {
  switch (channel) {
    case Channel::kBoundary: return ctx.groups.p2p(gradient ? P2pLink::kBoundaryGradient : P2pLink::kBoundaryData);
    case Channel::kLlmStages: return ctx.groups.p2p(gradient ? P2pLink::kLlmGradient : P2pLink::kLlmData);
    case Channel::kEncoderStages: return ctx.groups.p2p(gradient ? P2pLink::kEncoderGradient : P2pLink::kEncoderData);
  }
  throw std::logic_error("unknown point-to-point channel");
}

BoundaryLinks boundary_links(const StepContext& ctx) {
  return {&p2p_group(ctx, Channel::kBoundary, false), &p2p_group(ctx, Channel::kBoundary, true)};
}

int stage_peer(const ModuleGroups& module, int step) {
  GridCoord c = module.coord();
  c.pp += step;
  return module.grid().rank(c);
}

at::Tensor grad_or_zeros(const at::Tensor& stage_input) {
  return stage_input.grad().defined() ? stage_input.grad() : at::zeros_like(stage_input);
}

void backward_if_graph(const at::Tensor& output, const at::Tensor& grad) {
  if (output.requires_grad() && !output.is_leaf() && output.numel() > 0) {
    torch::autograd::backward({output}, {grad});
  }
}

std::vector<PipelineOp> ops_to_run(const StepContext& ctx, std::vector<PipelineOp> ops) {
  if (ctx.forward_only) {
    std::erase_if(ops, [](const PipelineOp& op) {
      return op.kind == PipelineOp::kBackward || op.kind == PipelineOp::kEncoderBackward;
    });
  }
  return ops;
}

at::Tensor run_micro_batches(const StepContext& ctx) {
  std::optional<at::NoGradGuard> no_graph;  // forward only: nothing kept for a backward
  if (ctx.forward_only) no_graph.emplace();
  const StepCastCache weight_casts(computes_in_bf16(ctx.config));  // each weight cast to bf16 once a step
  if (ctx.config.placement.placement == Placement::NonColocated) return run_noncolocated_micro_batches(ctx);
  if (ctx.config.placement.llm.pp > 1) {
    return ctx.config.placement.placement == Placement::Colocated ? run_colocated_pipeline(ctx) : run_uniform_pipeline(ctx);
  }
  at::Tensor loss = sequential_micro_batch(ctx, 0);
  for (int64_t m = 1; m < ctx.micro_batches; ++m) loss = loss + sequential_micro_batch(ctx, m);
  return loss;
}

}  // namespace hetpar
