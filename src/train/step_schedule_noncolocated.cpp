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
#include <map>
#include <memory>

#include "boundary/boundary_exchange.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/encoder_stage.hpp"
#include "train/micro_batch_route.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {
namespace {

std::unique_ptr<BoundaryExchange> make_exchange(const StepContext& ctx, int64_t micro, int encoder_dp,
                                                MicroBatchRoute& route) {
  route = route_micro_batch(ctx.data, ctx.config, ctx.step, micro);
  return std::make_unique<BoundaryExchange>(route.plan, ctx.config.encoder.tokens_per_image(), ctx.world,
                                            encoder_dp);
}

void wait_all(std::vector<Group::Pending>& pending) {
  for (Group::Pending& p : pending) p.wait();
  pending.clear();
}

// The encoder's stages form a pipeline whose last stage runs `run_ahead`
// micro-batches ahead of the LLM: 1F1B as if the LLM were run_ahead - 1 more
// stages after it (warm-ups of run_ahead - 1 on the last stage, one more on
// each stage before it).
at::Tensor encoder_side(const StepContext& ctx) {
  EncoderStage stage(ctx);
  const int stages = ctx.config.placement.encoder.pp;
  const int64_t ahead = std::min<int64_t>(ctx.config.layout.run_ahead, ctx.micro_batches);
  const int pipeline = stages + static_cast<int>(ahead) - 1;
  for (const PipelineOp& op : one_f_one_b(pipeline, ctx.groups.encoder().coord().pp, ctx.micro_batches)) {
    if (op.kind == PipelineOp::kForward) stage.forward(op.micro);
    else stage.backward(op.micro);
  }
  stage.finish();
  return at::zeros({}, at::kDouble);  // the encoder reports no loss
}

at::Tensor llm_side(const StepContext& ctx) {
  const RunConfig& c = ctx.config;
  ModuleGroups& llm = ctx.groups.llm();
  std::vector<Group::Pending> grad_sends;
  at::Tensor loss_share;
  for (int64_t m = 0; m < ctx.micro_batches; ++m) {
    MicroBatchRoute route;
    const auto exchange = make_exchange(ctx, m, -1, route);
    at::Tensor arrived;
    {
      auto timed = ctx.timer.measure(Phase::kWait);  // mostly waiting, when the encoder is behind
      arrived = exchange->receive_forward(c.llm.hidden, rows_tag(m), ctx.model.activation_dtype()).requires_grad_(true);
    }
    const MicroBatch batch = ctx.data.micro_batch(ctx.step, first_sample(c, llm.coord().dp, m),
                                                  c.data.micro_batch_size, /*with_pixels=*/false);
    const at::Tensor share = llm_forward_backward(ctx, batch, arrived);
    loss_share = loss_share.defined() ? loss_share + share : share;
    {
      auto timed = ctx.timer.measure(Phase::kBoundaryBackward);
      for (Group::Pending& p : exchange->post_backward(grad_or_zeros(arrived), grads_tag(m))) grad_sends.push_back(std::move(p));
    }
  }
  auto timed = ctx.timer.measure(Phase::kWait);
  wait_all(grad_sends);
  return loss_share;
}

// Under LLM PP: the first stage's rows come over the boundary, one
// micro-batch at a time in 1F1B order, which is the order the encoder sends.
class BoundaryRows : public ImageRows {
 public:
  explicit BoundaryRows(const StepContext& ctx) : ctx_(ctx) {}
  bool needs_pixels() const override { return false; }
  at::Tensor forward(int64_t micro, const MicroBatch&) override {
    InFlight& f = in_flight_[micro];
    MicroBatchRoute route;
    f.exchange = make_exchange(ctx_, micro, -1, route);
    auto timed = ctx_.timer.measure(Phase::kWait);
    f.rows = f.exchange->receive_forward(ctx_.config.llm.hidden, rows_tag(micro), ctx_.model.activation_dtype())
                 .requires_grad_(true);
    return f.rows;
  }
  void backward(int64_t micro) override {
    InFlight& f = in_flight_.at(micro);
    auto timed = ctx_.timer.measure(Phase::kBoundaryBackward);
    for (Group::Pending& p : f.exchange->post_backward(grad_or_zeros(f.rows), grads_tag(micro))) {
      sends_.push_back(std::move(p));
    }
    in_flight_.erase(micro);
  }
  void finish() override {
    auto timed = ctx_.timer.measure(Phase::kWait);
    wait_all(sends_);
  }

 private:
  struct InFlight {
    std::unique_ptr<BoundaryExchange> exchange;
    at::Tensor rows;
  };
  const StepContext& ctx_;
  std::map<int64_t, InFlight> in_flight_;
  std::vector<Group::Pending> sends_;
};

}  // namespace

at::Tensor run_noncolocated_micro_batches(const StepContext& ctx) {
  if (ctx.groups.encoder().active()) return encoder_side(ctx);
  if (ctx.config.placement.llm.pp == 1) return llm_side(ctx);
  BoundaryRows rows(ctx);
  return run_llm_pipeline(ctx, ctx.groups.llm().coord().pp == 0 ? &rows : nullptr);
}

}  // namespace hetpar
