// The non-colocated schedule: encoder ranks and LLM ranks are disjoint, so
// the encoder runs ahead by up to `layout.run_ahead` micro-batches (posting
// its rows without waiting) and does each backward as its gradients arrive.
// With run_ahead = 1 the two halves alternate and each waits for the other.
// Under LLM PP the LLM ranks run the pipeline (step_schedule_pipeline.cpp)
// and its first stage takes the rows; the encoder side is the same.
#include <ATen/ATen.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>

#include "boundary/boundary_exchange.hpp"
#include "train/micro_batch_route.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {
namespace {

// Message tags: rows and gradients of every micro-batch apart.
int rows_tag(int64_t micro) { return static_cast<int>(2 * micro); }
int grads_tag(int64_t micro) { return static_cast<int>(2 * micro + 1); }

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

at::Tensor encoder_side(const StepContext& ctx) {
  struct InFlight {
    std::unique_ptr<BoundaryExchange> exchange;
    at::Tensor rows;                     // with the graph its backward needs
    std::vector<Group::Pending> sends;
  };
  const int encoder_dp = ctx.groups.encoder().coord().dp;
  const int64_t depth = std::min<int64_t>(ctx.config.layout.run_ahead, ctx.micro_batches);
  std::deque<InFlight> in_flight;
  int64_t next = 0;
  for (int64_t done = 0; done < ctx.micro_batches; ++done) {
    for (; next < ctx.micro_batches && next - done < depth; ++next) {
      MicroBatchRoute route;
      InFlight f{make_exchange(ctx, next, encoder_dp, route), {}, {}};
      {
        auto timed = ctx.timer.measure(Phase::kEncoderForward);
        f.rows = ctx.model.encode(assigned_images(ctx.data, ctx.config, route, encoder_dp, ctx.step));
      }
      auto timed = ctx.timer.measure(Phase::kBoundaryForward);
      f.sends = f.exchange->post_forward(f.rows, rows_tag(next));
      in_flight.push_back(std::move(f));
    }
    InFlight& oldest = in_flight.front();
    at::Tensor grad;
    {
      auto timed = ctx.timer.measure(Phase::kWait);
      grad = oldest.exchange->receive_backward(ctx.config.llm.hidden, grads_tag(done), ctx.model.activation_dtype());
      wait_all(oldest.sends);
    }
    {
      auto timed = ctx.timer.measure(Phase::kEncoderBackward);
      backward_if_graph(oldest.rows, grad);
    }
    in_flight.pop_front();
  }
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
