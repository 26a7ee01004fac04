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

#include <map>
#include <memory>

#include "boundary/boundary_exchange.hpp"
#include "metrics/model_flops.hpp"
#include "parallel/colocated_pipeline_schedule.hpp"
#include "train/micro_batch_route.hpp"
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

StageOrders colocated_orders(const RunConfig& c, int64_t micro_batches) {
  const int pp = c.placement.llm.pp;
  if (parse_encoder_schedule(c.layout.encoder_schedule) == EncoderSchedule::kWholeStep) {
    return whole_step_orders(pp, micro_batches);
  }
  const int64_t in_flight = c.layout.encoder_in_flight == 0 ? pp + 1 : c.layout.encoder_in_flight;
  return bubble_fill_orders(micro_batches, in_flight, expected_costs(c, micro_batches));
}

// This rank's share of the encoder: E and e of each micro-batch. It owns the
// micro-batch's exchange, which the first stage's side below shares.
class EncoderShare {
 public:
  explicit EncoderShare(const StepContext& ctx) : ctx_(ctx), encoder_dp_(ctx.groups.encoder().coord().dp) {}

  void forward(int64_t micro) {
    const MicroBatchRoute route = route_micro_batch(ctx_.data, ctx_.config, ctx_.step, micro);
    InFlight& f = in_flight_[micro];
    f.exchange = std::make_unique<BoundaryExchange>(route.plan, ctx_.config.encoder.tokens_per_image(), ctx_.world,
                                                    encoder_dp_);
    {
      auto timed = ctx_.timer.measure(Phase::kEncoderForward);
      f.rows = ctx_.model.encode(assigned_images(ctx_.data, ctx_.config, route, encoder_dp_, ctx_.step));
    }
    auto timed = ctx_.timer.measure(Phase::kBoundaryForward);
    for (Group::Pending& p : f.exchange->post_forward(f.rows, rows_tag(micro))) sends_.push_back(std::move(p));
  }

  void backward(int64_t micro) {
    InFlight& f = in_flight_.at(micro);
    at::Tensor grad;
    {
      auto timed = ctx_.timer.measure(Phase::kWait);
      grad = f.exchange->receive_backward(ctx_.config.llm.hidden, grads_tag(micro), ctx_.model.activation_dtype());
    }
    {
      auto timed = ctx_.timer.measure(Phase::kEncoderBackward);
      backward_if_graph(f.rows, grad);
    }
    in_flight_.erase(micro);
  }

  BoundaryExchange& exchange(int64_t micro) { return *in_flight_.at(micro).exchange; }

  void finish() {
    auto timed = ctx_.timer.measure(Phase::kWait);
    for (Group::Pending& p : sends_) p.wait();
    sends_.clear();
  }

 private:
  struct InFlight {
    std::unique_ptr<BoundaryExchange> exchange;
    at::Tensor rows;  // with the graph e needs
  };
  const StepContext& ctx_;
  int encoder_dp_;
  std::map<int64_t, InFlight> in_flight_;
  std::vector<Group::Pending> sends_;
};

// The first stage's rows: received over the micro-batch's exchange (E of that
// micro-batch has run on this rank, so the exchange exists), gradients sent back.
class ColocatedRows : public ImageRows {
 public:
  ColocatedRows(const StepContext& ctx, EncoderShare& encoder) : ctx_(ctx), encoder_(encoder) {}
  bool needs_pixels() const override { return false; }
  at::Tensor forward(int64_t micro, const MicroBatch&) override {
    auto timed = ctx_.timer.measure(Phase::kWait);
    const at::Tensor rows = encoder_.exchange(micro)
                                .receive_forward(ctx_.config.llm.hidden, rows_tag(micro), ctx_.model.activation_dtype())
                                .requires_grad_(true);
    rows_[micro] = rows;
    return rows;
  }
  void backward(int64_t micro) override {
    auto timed = ctx_.timer.measure(Phase::kBoundaryBackward);
    const at::Tensor grad = grad_or_zeros(rows_.at(micro));
    for (Group::Pending& p : encoder_.exchange(micro).post_backward(grad, grads_tag(micro))) sends_.push_back(std::move(p));
    rows_.erase(micro);
  }
  void finish() override {
    auto timed = ctx_.timer.measure(Phase::kWait);
    for (Group::Pending& p : sends_) p.wait();
    sends_.clear();
  }

 private:
  const StepContext& ctx_;
  EncoderShare& encoder_;
  std::map<int64_t, at::Tensor> rows_;  // the LLM's stage inputs
  std::vector<Group::Pending> sends_;
};

}  // namespace

at::Tensor run_colocated_pipeline(const StepContext& ctx) {
  const int stage_index = ctx.groups.llm().coord().pp;
  const StageOrders orders = colocated_orders(ctx.config, ctx.micro_batches);
  EncoderShare encoder(ctx);
  ColocatedRows rows(ctx, encoder);
  PipelineStage stage(ctx, stage_index == 0 ? &rows : nullptr);
  for (const PipelineOp& op : orders[stage_index]) {
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
