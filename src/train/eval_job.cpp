#include "train/eval_job.hpp"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include "dist/module_groups.hpp"
#include "interop/hf_llava.hpp"
#include "io/safetensors.hpp"
#include "dist/device.hpp"
#include "train/job_setup.hpp"
#include "train/multimodal_model.hpp"
#include "util/log.hpp"

namespace hetpar {

MicroBatch read_hf_batch(const std::string& path, const RunConfig& c) {
  const auto tensors = read_safetensors(path);
  auto get = [&](const char* name) {
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error(path + ": no tensor " + name);
    return it->second;
  };
  MicroBatch b;
  b.ids = get("input_ids").to(at::kLong);
  const at::Tensor labels = get("labels").to(at::kLong);
  b.pixels = get("pixel_values").to(at::kFloat);
  if (b.ids.dim() != 2 || labels.sizes() != b.ids.sizes()) {
    throw std::runtime_error(path + ": input_ids and labels must both be [batch, sequence]");
  }
  if (b.ids.size(1) > c.llm.seq_len) {
    throw std::runtime_error(fmt::format("{}: sequences of {} tokens exceed llm.seq_len = {}", path, b.ids.size(1),
                                         c.llm.seq_len));
  }
  // Out-of-range ids would index past the embedding or score a loss against
  // no class: a number that looks right and is not.
  auto check_range = [&](const at::Tensor& t, const char* name, bool ignore_allowed) {
    const at::Tensor bad = ignore_allowed ? (t != -100) & ((t < 0) | (t >= c.llm.vocab_size))
                                          : (t < 0) | (t >= c.llm.vocab_size);
    if (bad.any().item<bool>()) {
      const int64_t first = at::nonzero(bad.flatten())[0][0].item<int64_t>();
      throw std::runtime_error(fmt::format("{}: {} holds {} at position {}, outside the vocabulary [0, {}){}", path,
                                           name, t.flatten()[first].item<int64_t>(), first, c.llm.vocab_size,
                                           ignore_allowed ? " (and not -100, the ignored label)" : ""));
    }
  };
  check_range(b.ids, "input_ids", false);
  check_range(labels, "labels", true);
  // transformers shifts inside the loss; hetpar's targets are pre-shifted.
  b.targets = at::full_like(labels, -100);
  b.targets.narrow(1, 0, labels.size(1) - 1).copy_(labels.narrow(1, 1, labels.size(1) - 1));
  if ((b.targets >= 0).sum().item<int64_t>() == 0) {
    throw std::runtime_error(path + ": no target token (every label after the first position is -100): "
                             "the loss of such a batch is undefined");
  }
  b.image_mask = b.ids == c.llm.image_token_id;
  const std::vector<int64_t> image_shape{c.encoder.channels, c.encoder.image_size, c.encoder.image_size};
  if (b.pixels.dim() != 4 || b.pixels.sizes().slice(1).vec() != image_shape) {
    throw std::runtime_error(fmt::format("{}: pixel_values has shape [{}], expected [images, {}]", path,
                                         fmt::join(b.pixels.sizes(), ", "), fmt::join(image_shape, ", ")));
  }
  b.images = b.pixels.size(0);
  const int64_t placeholders = b.image_mask.sum().item<int64_t>();
  if (placeholders != b.images * c.encoder.tokens_per_image()) {
    throw std::runtime_error(fmt::format("{}: {} image placeholders (token {}) but {} images of {} tokens", path,
                                         placeholders, c.llm.image_token_id, b.images, c.encoder.tokens_per_image()));
  }
  return b;
}

int64_t batch_sequence_length(const std::string& path) {
  const auto tensors = read_safetensors(path);
  const auto it = tensors.find("input_ids");
  if (it == tensors.end()) throw std::runtime_error(path + ": no tensor input_ids");
  if (it->second.dim() != 2) throw std::runtime_error(path + ": input_ids must be [batch, sequence]");
  return it->second.size(1);
}

int run_eval_job(const RunConfig& config, const LaunchEnv& env, const std::string& init_hf, const std::string& batch) {
  const at::Device device = select_device(config, env);
  Runtime runtime(env, runtime_options(config.runtime, device));
  JobGroups groups(runtime, config.placement);
  Group& encoder_tp = groups.encoder().get(GroupKind::kTp);
  Group& llm_tp = groups.llm().get(GroupKind::kTp);
  MultimodalModel model(config, &encoder_tp, &llm_tp);
  model.to(device);
  const std::string note = load_hf(model, groups, runtime.world(), init_hf);
  if (runtime.rank() == 0 && !note.empty()) log_info("{}: {}", init_hf, note);
  MicroBatch b = read_hf_batch(batch, config);
  for (at::Tensor* t : {&b.ids, &b.targets, &b.image_mask, &b.pixels}) *t = t->to(device);
  at::NoGradGuard no_grad;
  const double count = (b.targets >= 0).sum().item<double>();
  const double loss = model.loss_sum(b).item<double>() / count;  // every DP replica scores the whole batch
  if (runtime.rank() == 0) log_info("eval loss: {:.9g} over {} target tokens", loss, static_cast<int64_t>(count));
  return 0;
}

}  // namespace hetpar
