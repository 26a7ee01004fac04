#include "data/batch_source.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <stdexcept>

#include "util/host_to_device.hpp"

namespace hetpar {

BatchSource::BatchSource(const EncoderConfig& encoder, const LlmConfig& llm, int64_t global_batch_size,
                         const at::Device& device)
    : encoder_(encoder), llm_(llm), global_batch_size_(global_batch_size), device_(device) {}

MicroBatch BatchSource::micro_batch(int64_t step, int64_t first, int64_t count, bool with_pixels) const {
  std::vector<int64_t> ids, targets;
  std::vector<at::Tensor> images;
  int64_t image_count = 0;
  for (int64_t s = first; s < first + count; ++s) {
    const SampleText t = text(step, s);
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
    targets.insert(targets.end(), t.targets.begin(), t.targets.end());
    image_count += static_cast<int64_t>(t.image_classes.size());
    for (size_t j = 0; with_pixels && j < t.image_classes.size(); ++j) {
      images.push_back(image(step, s, static_cast<int>(j), t.image_classes[j]));
    }
  }
  MicroBatch b;
  const at::Tensor host_ids = at::tensor(ids, at::kLong).view({count, llm_.seq_len});
  b.ids = on_device(host_ids);
  b.targets = on_device(at::tensor(targets, at::kLong).view({count, llm_.seq_len}));
  b.image_mask = b.ids == llm_.image_token_id;
  b.image_mask_host = host_ids == llm_.image_token_id;
  b.images = image_count;
  b.pixels = on_device(images.empty()
                           ? at::zeros({0, encoder_.channels, encoder_.image_size, encoder_.image_size}, at::kFloat)
                           : at::stack(images));
  return b;
}

at::Tensor BatchSource::on_device(const at::Tensor& host) const { return host_to_device(host, device_); }

int64_t BatchSource::images_in_step(int64_t step) const {
  int64_t n = 0;
  for (int64_t s = 0; s < global_batch_size_; ++s) n += static_cast<int64_t>(text(step, s).image_classes.size());
  return n;
}

int64_t BatchSource::target_tokens(int64_t step) const {
  int64_t n = 0;
  for (int64_t s = 0; s < global_batch_size_; ++s) {
    for (int64_t t : text(step, s).targets) n += t >= 0;
  }
  return n;
}

double BatchSource::loss_divisor(int64_t first, int64_t last, const std::string& what) const {
  int64_t n = 0;
  for (int64_t b = first; b <= last; ++b) n += target_tokens(b);
  if (n == 0) {
    throw std::runtime_error(fmt::format("{} of {} has no target token: every label of its {} samples is -100 (no "
                                         "loss to take the mean of); give each batch a sample with a response",
                                         what, description(), (last - first + 1) * global_batch_size_));
  }
  return static_cast<double>(n);
}

}  // namespace hetpar
