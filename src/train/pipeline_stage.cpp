#include "train/pipeline_stage.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "train/micro_batch_route.hpp"
#include "train/sequence_part.hpp"

namespace hetpar {

PipelineStage::PipelineStage(const StepContext& ctx, ImageRows* rows)
    : ctx_(ctx), rows_(rows), coord_(ctx.groups.llm().coord()), stages_(ctx.config.placement.llm.pp),
      cp_(ctx.groups.llm().get(GroupKind::kCp)), loss_(at::zeros({}, ctx.model.options(at::kDouble))) {}

void PipelineStage::forward(int64_t micro) {
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
    // Under sequence parallelism each TP rank sends and receives its part of the sequence.
    const int64_t positions = f.batch.ids.size(1) / c.placement.llm.sequence_parts();
    at::Tensor h = at::empty({f.batch.ids.size(0), positions, c.llm.hidden}, ctx_.model.residual_options());
    p2p_group(ctx_, Channel::kLlmStages, false).recv(h, stage_peer(ctx_.groups.llm(), -1), data_tag(Channel::kLlmStages, micro));
    f.input = hidden = h.requires_grad_(true);
  }
  auto timed = ctx_.timer.measure(Phase::kLlmForward);
  const at::Tensor out = ctx_.model.llm_stage(f.batch.ids, image_rows, f.batch.image_mask, hidden);
  if (last) {
    f.output = ctx_.model.llm->loss_sum(out, f.batch.targets) / ctx_.target_tokens;
    if (coord_.tp == 0) loss_ = loss_ + f.output.detach().to(at::kDouble);
  } else {
    f.output = out;
    sends_.push_back(p2p_group(ctx_, Channel::kLlmStages, false)
                         .isend(out.detach().to(ctx_.model.residual_dtype()).contiguous(), stage_peer(ctx_.groups.llm(), +1),
                                data_tag(Channel::kLlmStages, micro)));
  }
  if (ctx_.forward_only) in_flight_.erase(micro);  // no backward will come for it
}

void PipelineStage::backward(int64_t micro) {
  const bool first = coord_.pp == 0, last = coord_.pp == stages_ - 1;
  InFlight& f = in_flight_.at(micro);
  if (last) {
    auto timed = ctx_.timer.measure(Phase::kLlmBackward);
    before_llm_backward(ctx_, micro);
    f.output.backward();
  } else {
    at::Tensor grad = at::empty(f.output.sizes(), ctx_.model.residual_options());
    {
      auto timed = ctx_.timer.measure(Phase::kPipelineWait);
      p2p_group(ctx_, Channel::kLlmStages, true).recv(grad, stage_peer(ctx_.groups.llm(), +1), gradient_tag(Channel::kLlmStages, micro));
    }
    auto timed = ctx_.timer.measure(Phase::kLlmBackward);
    before_llm_backward(ctx_, micro);
    backward_if_graph(f.output, grad.to(f.output.scalar_type()));
  }
  if (first) {
    rows_->backward(micro);
  } else {
    sends_.push_back(p2p_group(ctx_, Channel::kLlmStages, true)
                         .isend(grad_or_zeros(f.input).contiguous(), stage_peer(ctx_.groups.llm(), -1),
                                gradient_tag(Channel::kLlmStages, micro)));
  }
  in_flight_.erase(micro);
}

at::Tensor PipelineStage::finish() {
  auto timed = ctx_.timer.measure(Phase::kPipelineWait);
  for (Group::Pending& p : sends_) p.wait();
  sends_.clear();
  if (rows_ != nullptr && coord_.pp == 0) rows_->finish();
  return loss_;
}

}  // namespace hetpar
