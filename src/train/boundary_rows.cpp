#include "train/boundary_rows.hpp"

#include "train/micro_batch_route.hpp"

namespace hetpar {

BoundaryExchange& BoundaryRows::exchange(int64_t micro) {
  if (encoder_ != nullptr) return encoder_->exchange(micro);
  return *in_flight_.at(micro).own;
}

at::Tensor BoundaryRows::forward(int64_t micro, const MicroBatch&) {
  InFlight& f = in_flight_[micro];
  if (encoder_ == nullptr) {
    const MicroBatchRoute route = route_micro_batch(ctx_.data, ctx_.config, ctx_.step, micro);
    f.own = std::make_unique<BoundaryExchange>(route.plan, ctx_.config.encoder.tokens_per_image(), ctx_.world, -1,
                                               boundary_links(ctx_));
  }
  auto timed = ctx_.timer.measure(Phase::kWait);  // mostly waiting, when the encoder is behind
  f.rows = exchange(micro)
               .receive_forward(ctx_.config.llm.hidden, data_tag(Channel::kBoundary, micro), ctx_.model.activation_options())
               .requires_grad_(true);
  const at::Tensor rows = f.rows;
  if (ctx_.forward_only) in_flight_.erase(micro);  // no gradient goes back
  return rows;
}

void BoundaryRows::backward(int64_t micro) {
  auto timed = ctx_.timer.measure(Phase::kBoundaryBackward);
  const at::Tensor grad = grad_or_zeros(in_flight_.at(micro).rows);
  for (Group::Pending& p : exchange(micro).post_backward(grad, gradient_tag(Channel::kBoundary, micro))) {
    sends_.push_back(std::move(p));
  }
  in_flight_.erase(micro);
}

void BoundaryRows::finish() {
  auto timed = ctx_.timer.measure(Phase::kWait);
  for (Group::Pending& p : sends_) p.wait();
  sends_.clear();
}

}  // namespace hetpar
