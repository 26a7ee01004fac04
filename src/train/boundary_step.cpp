#include "train/boundary_step.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "boundary/boundary_exchange.hpp"

namespace hetpar {

int64_t first_sample(const RunConfig& c, int64_t dp_rank, int64_t micro) {
  return dp_rank * (c.data.global_batch_size / c.placement.llm.dp) + micro * c.data.micro_batch_size;
}

std::vector<int64_t> micro_batch_samples(const RunConfig& c, int64_t micro) {
  const int64_t mbs = c.data.micro_batch_size;
  std::vector<int64_t> out;
  for (int64_t s = 0; s < c.placement.llm.dp * mbs; ++s) out.push_back(first_sample(c, s / mbs, micro) + s % mbs);
  return out;
}

double boundary_micro_batch(MultimodalModel& model, const SyntheticData& data, const RunConfig& c, JobGroups& groups,
                            Group& world, int64_t step, int64_t micro, double target_tokens) {
  const int64_t tpi = c.encoder.tokens_per_image();
  const std::vector<int64_t> samples = micro_batch_samples(c, micro);
  // Every rank derives the same metadata from the (cheap) text of every sample.
  BoundaryBatch meta{c.llm.seq_len, tpi, {}};
  std::vector<SampleText> texts;
  for (int64_t g : samples) {
    texts.push_back(data.text(step, g));
    std::vector<int64_t> starts;
    int64_t run = 0;
    for (int64_t pos = 0; pos < c.llm.seq_len; ++pos) {
      if (texts.back().ids[pos] != kImageToken) continue;
      if (run++ % tpi == 0) starts.push_back(pos);
    }
    meta.image_starts.push_back(starts);
  }
  const BoundaryPlan plan = plan_boundary(c.placement, meta);
  BoundaryExchange exchange(plan, tpi, world, groups.encoder().active() ? groups.encoder().coord().dp : -1);

  // Encoder half: this DP group's images, in order.
  at::Tensor rows = at::zeros({0, c.llm.hidden}).set_requires_grad(true);
  if (groups.encoder().active()) {
    std::vector<at::Tensor> pixels;
    std::vector<int> image_in_sample(meta.image_starts.size(), 0);
    for (size_t j = 0; j < plan.image_sample.size(); ++j) {
      const int s = plan.image_sample[j];
      const int index = image_in_sample[s]++;
      if (plan.image_encoder_dp[j] != groups.encoder().coord().dp) continue;
      pixels.push_back(data.image(step, samples[s], index, texts[s].image_classes[index]));
    }
    if (!pixels.empty()) rows = model.encode(at::stack(pixels));
  }
  const at::Tensor arrived = exchange.forward(rows);

  if (!groups.llm().active()) {  // non-colocated encoder rank: wait for the gradients
    torch::autograd::backward({arrived}, {at::zeros_like(arrived)});
    return 0;
  }
  const MicroBatch batch =
      data.micro_batch(step, first_sample(c, groups.llm().coord().dp, micro), c.data.micro_batch_size);
  const at::Tensor logits = model.llm->forward(batch.ids, arrived, batch.image_mask);
  at::Tensor loss = model.llm->loss_sum(logits, batch.targets) / target_tokens;
  loss.backward();
  return groups.llm().coord().tp == 0 ? loss.item<double>() : 0.0;
}

}  // namespace hetpar
