#include "train/forward_only_loss.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "metrics/phase_timer.hpp"
#include "train/step_schedule.hpp"

namespace hetpar {

ForwardOnlyLoss forward_only_loss(MultimodalModel& model, const BatchSource& data, const RunConfig& config,
                                  JobGroups& groups, Group& world, int64_t batches) {
  // One divisor for all of them: each batch's share sums to the mean over every target token.
  const auto target_tokens = static_cast<int64_t>(
      data.loss_divisor(1, batches, batches == 1 ? std::string("the evaluated batch") : fmt::format("the {} evaluated batches", batches)));
  PhaseTimer timer(model.options(at::kFloat).device());  // its phases are not the training step's
  at::Tensor loss;
  for (int64_t b = 1; b <= batches; ++b) {
    StepContext ctx{model, data, config, groups, world, timer, b, micro_batches_per_step(config),
                    static_cast<double>(target_tokens)};
    ctx.forward_only = true;
    const at::Tensor share = run_micro_batches(ctx);
    loss = loss.defined() ? loss + share : share;
  }
  loss = loss.to(at::kDouble).reshape({1}).clone();
  world.all_reduce(loss);  // each replica's last stage holds its samples' share
  const double value = loss.item<double>();  // the device's work done: its phase events can be read
  static_cast<void>(timer.take());
  return {value, target_tokens};
}

}  // namespace hetpar
