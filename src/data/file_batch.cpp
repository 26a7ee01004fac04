#include "data/file_batch.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "io/safetensors.hpp"

namespace hetpar {
namespace {

constexpr int64_t kIgnored = -100;

at::Tensor tensor_of(const std::map<std::string, at::Tensor>& tensors, const std::string& path, const char* name) {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error(path + ": no tensor " + name);
  return it->second;
}

// Out-of-range ids would index past the embedding or score a loss against
// no class: a number that looks right and is not.
void check_range(const at::Tensor& t, const std::string& path, const char* name, bool ignore_allowed, int64_t vocab) {
  const at::Tensor bad = ignore_allowed ? (t != kIgnored) & ((t < 0) | (t >= vocab)) : (t < 0) | (t >= vocab);
  if (!bad.any().item<bool>()) return;
  const int64_t first = at::nonzero(bad.flatten())[0][0].item<int64_t>();
  throw std::runtime_error(fmt::format("{}: {} holds {} at position {}, outside the vocabulary [0, {}){}", path, name,
                                       t.flatten()[first].item<int64_t>(), first, vocab,
                                       ignore_allowed ? " (and not -100, the ignored label)" : ""));
}

}  // namespace

std::pair<int64_t, int64_t> batch_file_shape(const std::string& path) {
  // The header says it: the images need not be read.
  const SafetensorsHeader header = read_safetensors_header(path);
  const auto it = header.entries.find("input_ids");
  if (it == header.entries.end()) throw std::runtime_error(path + ": no tensor input_ids");
  const std::vector<int64_t>& shape = it->second.shape;
  if (shape.size() != 2) throw std::runtime_error(path + ": input_ids must be [batch, sequence]");
  return {shape[0], shape[1]};
}

FileBatch::FileBatch(const std::string& path, const RunConfig& c, const at::Device& device)
    : BatchSource(c.encoder, c.llm, 0, device) {
  const auto tensors = read_safetensors(path);
  const at::Tensor ids = tensor_of(tensors, path, "input_ids").to(at::kLong).contiguous();
  const at::Tensor labels = tensor_of(tensors, path, "labels").to(at::kLong).contiguous();
  pixels_ = tensor_of(tensors, path, "pixel_values").to(at::kFloat);
  if (ids.dim() != 2 || labels.sizes() != ids.sizes()) {
    throw std::runtime_error(path + ": input_ids and labels must both be [batch, sequence]");
  }
  const int64_t length = ids.size(1);
  if (length > c.llm.seq_len) {
    throw std::runtime_error(fmt::format("{}: sequences of {} tokens exceed llm.seq_len = {}", path, length,
                                         c.llm.seq_len));
  }
  check_range(ids, path, "input_ids", false, c.llm.vocab_size);
  check_range(labels, path, "labels", true, c.llm.vocab_size);
  const std::vector<int64_t> image_shape{c.encoder.channels, c.encoder.image_size, c.encoder.image_size};
  if (pixels_.dim() != 4 || pixels_.sizes().slice(1).vec() != image_shape) {
    throw std::runtime_error(fmt::format("{}: pixel_values has shape [{}], expected [images, {}]", path,
                                         fmt::join(pixels_.sizes(), ", "), fmt::join(image_shape, ", ")));
  }
  const int64_t tpi = c.encoder.tokens_per_image();
  int64_t images = 0, target_count = 0;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    SampleText t;
    const int64_t* id = ids.data_ptr<int64_t>() + b * length;
    const int64_t* label = labels.data_ptr<int64_t>() + b * length;
    t.ids.assign(c.llm.seq_len, 0);
    t.targets.assign(c.llm.seq_len, kIgnored);
    // transformers shifts inside the loss; hetpar's targets are pre-shifted.
    std::vector<int64_t> placeholders;
    for (int64_t i = 0; i < length; ++i) {
      t.ids[i] = id[i];
      if (i + 1 < length) t.targets[i] = label[i + 1];
      target_count += t.targets[i] >= 0;
      if (id[i] == c.llm.image_token_id) placeholders.push_back(i);
    }
    // Each image is a run of tpi consecutive placeholders (the boundary routes rows by their runs).
    for (size_t k = 0; k < placeholders.size(); ++k) {
      if (k % tpi != 0 && placeholders[k] != placeholders[k - 1] + 1) {
        throw std::runtime_error(fmt::format("{}: sample {}: the image placeholders (token {}) at positions {} and "
                                             "{} break a run of {} (one image)", path, b, c.llm.image_token_id,
                                             placeholders[k - 1], placeholders[k], tpi));
      }
    }
    if (placeholders.size() % tpi != 0) {
      throw std::runtime_error(fmt::format("{}: sample {} holds {} image placeholders (token {}), not a whole "
                                           "number of images of {} tokens", path, b, placeholders.size(),
                                           c.llm.image_token_id, tpi));
    }
    first_image_.push_back(images);
    t.image_classes.assign(placeholders.size() / tpi, 0);
    images += static_cast<int64_t>(t.image_classes.size());
    texts_.push_back(std::move(t));
  }
  if (images != pixels_.size(0)) {
    throw std::runtime_error(fmt::format("{}: {} image placeholders (token {}) but {} images of {} tokens", path,
                                         images * tpi, c.llm.image_token_id, pixels_.size(0), tpi));
  }
  if (target_count == 0) {
    throw std::runtime_error(path + ": no target token (every label after the first position is -100): "
                             "the loss of such a batch is undefined");
  }
  global_batch_size_ = samples();
}

SampleText FileBatch::text(int64_t /*step*/, int64_t sample) const { return texts_.at(sample); }

at::Tensor FileBatch::image(int64_t /*step*/, int64_t sample, int index, int /*image_class*/) const {
  return pixels_[first_image_.at(sample) + index];
}

}  // namespace hetpar
