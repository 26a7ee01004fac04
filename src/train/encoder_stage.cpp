#include "train/encoder_stage.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "train/micro_batch_route.hpp"

namespace hetpar {

EncoderStage::EncoderStage(const StepContext& ctx)
    : ctx_(ctx),
      coord_(ctx.groups.encoder().coord()),
      stages_(ctx.config.placement.encoder.pp),
      trains_(!ctx.config.encoder.frozen) {}

void EncoderStage::forward(int64_t micro) {
  const RunConfig& c = ctx_.config;
  const bool first = coord_.pp == 0, last = coord_.pp == stages_ - 1;
  const MicroBatchRoute route = route_micro_batch(ctx_.data, c, ctx_.step, micro);
  InFlight& f = in_flight_[micro];
  f.images = std::count(route.plan.image_encoder_dp.begin(), route.plan.image_encoder_dp.end(), coord_.dp);
  if (last) {
    f.exchange = std::make_unique<BoundaryExchange>(route.plan, c.encoder.tokens_per_image(), ctx_.world, coord_.dp,
                                                    boundary_links(ctx_));
  }
  const auto no_images = [&] { return at::empty({0, c.encoder.patches_per_image(), c.encoder.hidden}, ctx_.model.residual_options()); };
  at::Tensor pixels;
  if (first) {
    pixels = assigned_images(ctx_.data, c, route, coord_.dp, ctx_.step);
  } else if (f.images > 0) {
    auto timed = ctx_.timer.measure(Phase::kPipelineWait);
    at::Tensor h = at::empty({f.images, c.encoder.patches_per_image(), c.encoder.hidden}, ctx_.model.residual_options());
    p2p_group(ctx_, Channel::kEncoderStages, false).recv(h, stage_peer(ctx_.groups.encoder(), -1), data_tag(Channel::kEncoderStages, micro));
    f.input = trains_ ? h.requires_grad_(true) : h;
  } else {
    f.input = no_images();
  }
  {
    auto timed = ctx_.timer.measure(Phase::kEncoderForward);
    // No images and no boundary to feed: nothing to run (the last stage still posts its empty rows).
    f.output = !last && f.images == 0 ? no_images() : ctx_.model.encoder_stage(pixels, f.input);
  }
  if (last) {
    auto timed = ctx_.timer.measure(Phase::kBoundaryForward);
    for (Group::Pending& p : f.exchange->post_forward(f.output, data_tag(Channel::kBoundary, micro))) {
      forward_sends_[micro].push_back(std::move(p));
    }
  } else if (f.images > 0) {
    forward_sends_[micro].push_back(p2p_group(ctx_, Channel::kEncoderStages, false)
                         .isend(f.output.detach().to(ctx_.model.residual_dtype()).contiguous(), stage_peer(ctx_.groups.encoder(), +1),
                                data_tag(Channel::kEncoderStages, micro)));
  }
  // Forward only, no backward comes: the sends hold what they send, and only
  // the exchange stays (a colocated rank's LLM side still receives through it).
  if (ctx_.forward_only) {
    f.input.reset();
    f.output.reset();
  }
}

void EncoderStage::backward(int64_t micro) {
  const RunConfig& c = ctx_.config;
  const bool first = coord_.pp == 0, last = coord_.pp == stages_ - 1;
  InFlight& f = in_flight_.at(micro);
  at::Tensor grad;
  if (last) {
    auto timed = ctx_.timer.measure(Phase::kWait);  // the LLM's side, across the boundary
    grad = f.exchange->receive_backward(c.llm.hidden, gradient_tag(Channel::kBoundary, micro), ctx_.model.activation_options());
  } else if (trains_ && f.images > 0) {
    auto timed = ctx_.timer.measure(Phase::kPipelineWait);
    grad = at::empty(f.output.sizes(), ctx_.model.residual_options());
    p2p_group(ctx_, Channel::kEncoderStages, true).recv(grad, stage_peer(ctx_.groups.encoder(), +1), gradient_tag(Channel::kEncoderStages, micro));
  }
  if (grad.defined()) {
    // Every receiver of this micro-batch's rows sent their gradient after taking them: its sends are done.
    if (const auto sent = forward_sends_.find(micro); sent != forward_sends_.end()) {
      for (Group::Pending& p : sent->second) p.wait();
      forward_sends_.erase(sent);
    }
    auto timed = ctx_.timer.measure(Phase::kEncoderBackward);
    before_encoder_backward(ctx_, micro);
    backward_if_graph(f.output, grad.to(f.output.scalar_type()));
  }
  if (!first && trains_ && f.images > 0) {
    sends_.push_back(p2p_group(ctx_, Channel::kEncoderStages, true)
                         .isend(grad_or_zeros(f.input).contiguous(), stage_peer(ctx_.groups.encoder(), -1),
                                gradient_tag(Channel::kEncoderStages, micro)));
  }
  in_flight_.erase(micro);
}

void EncoderStage::finish() {
  auto timed = ctx_.timer.measure(Phase::kWait);
  for (auto& [micro, sends] : forward_sends_) {
    for (Group::Pending& p : sends) p.wait();
  }
  forward_sends_.clear();
  for (Group::Pending& p : sends_) p.wait();
  sends_.clear();
  in_flight_.clear();  // forward only, the exchanges kept until now
}

BoundaryExchange& EncoderStage::exchange(int64_t micro) { return *in_flight_.at(micro).exchange; }

}  // namespace hetpar
