#include "train/micro_batch_route.hpp"

#include <ATen/ATen.h>

namespace hetpar {

int64_t first_sample(const RunConfig& c, int64_t dp_rank, int64_t micro) {
  return dp_rank * (c.data.global_batch_size / c.placement.llm.dp) + micro * c.data.micro_batch_size;
}

MicroBatchRoute route_micro_batch(const BatchSource& data, const RunConfig& c, int64_t step, int64_t micro) {
  const int64_t tpi = c.encoder.tokens_per_image();
  const int64_t mbs = c.data.micro_batch_size;
  MicroBatchRoute route;
  BoundaryBatch meta{c.llm.seq_len, tpi, {}};
  for (int64_t s = 0; s < c.placement.llm.dp * mbs; ++s) {
    route.samples.push_back(first_sample(c, s / mbs, micro) + s % mbs);
    route.texts.push_back(data.text(step, route.samples.back()));
    std::vector<int64_t> starts;
    int64_t run = 0;
    for (int64_t pos = 0; pos < c.llm.seq_len; ++pos) {
      if (route.texts.back().ids[pos] != c.llm.image_token_id) continue;
      if (run++ % tpi == 0) starts.push_back(pos);
    }
    meta.image_starts.push_back(starts);
  }
  route.plan = plan_boundary(c.placement, meta);
  return route;
}

at::Tensor assigned_images(const BatchSource& data, const RunConfig& c, const MicroBatchRoute& route,
                           int encoder_dp, int64_t step) {
  const BoundaryPlan& plan = route.plan;
  std::vector<at::Tensor> pixels;
  std::vector<int> image_in_sample(route.samples.size(), 0);
  for (size_t j = 0; j < plan.image_sample.size(); ++j) {
    const int s = plan.image_sample[j];
    const int index = image_in_sample[s]++;
    if (plan.image_encoder_dp[j] != encoder_dp) continue;
    pixels.push_back(data.image(step, route.samples[s], index, route.texts[s].image_classes[index]));
  }
  if (pixels.empty()) return data.on_device(at::zeros({0, c.encoder.channels, c.encoder.image_size, c.encoder.image_size}));
  return data.on_device(at::stack(pixels));
}

}  // namespace hetpar
