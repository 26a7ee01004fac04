#include "data/batch_file_rows.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <vector>

namespace hetpar {
namespace {

constexpr int64_t kIgnored = -100;

// Out-of-range ids would index past the embedding or score a loss against
// no class: a number that looks right and is not.
void check_range(const int64_t* values, int64_t length, const char* name, bool ignore_allowed, int64_t vocab,
                 const std::string& where) {
  for (int64_t i = 0; i < length; ++i) {
    const int64_t v = values[i];
    if ((v >= 0 && v < vocab) || (ignore_allowed && v == kIgnored)) continue;
    throw std::runtime_error(fmt::format("{}: {} holds {} at position {}, outside the vocabulary [0, {}){}", where,
                                         name, v, i, vocab, ignore_allowed ? " (and not -100, the ignored label)" : ""));
  }
}

}  // namespace

SampleText sample_from_rows(const int64_t* ids, const int64_t* labels, int64_t length, const RunConfig& c,
                            const std::string& where) {
  check_range(ids, length, "input_ids", false, c.llm.vocab_size, where);
  check_range(labels, length, "labels", true, c.llm.vocab_size, where);
  SampleText t;
  t.ids.assign(c.llm.seq_len, 0);
  t.targets.assign(c.llm.seq_len, kIgnored);
  // transformers shifts inside the loss; hetpar's targets are pre-shifted.
  std::vector<int64_t> placeholders;
  for (int64_t i = 0; i < length; ++i) {
    t.ids[i] = ids[i];
    if (i + 1 < length) t.targets[i] = labels[i + 1];
    if (ids[i] == c.llm.image_token_id) placeholders.push_back(i);
  }
  // Each image is a run of tpi consecutive placeholders (the boundary routes rows by their runs).
  const int64_t tpi = c.encoder.tokens_per_image();
  for (size_t k = 0; k < placeholders.size(); ++k) {
    if (k % tpi != 0 && placeholders[k] != placeholders[k - 1] + 1) {
      throw std::runtime_error(fmt::format("{}: the image placeholders (token {}) at positions {} and {} break a run "
                                           "of {} (one image)", where, c.llm.image_token_id, placeholders[k - 1],
                                           placeholders[k], tpi));
    }
  }
  if (placeholders.size() % tpi != 0) {
    throw std::runtime_error(fmt::format("{} holds {} image placeholders (token {}), not a whole number of images of "
                                         "{} tokens", where, placeholders.size(), c.llm.image_token_id, tpi));
  }
  t.image_classes.assign(placeholders.size() / tpi, 0);
  return t;
}

void check_batch_header(const SafetensorsHeader& header, const RunConfig& c, const std::string& path) {
  const SafetensorsEntry& ids_entry = safetensors_entry(header, path, "input_ids");
  const SafetensorsEntry& pixels_entry = safetensors_entry(header, path, "pixel_values");
  const std::vector<int64_t>& ids = ids_entry.shape;
  const std::vector<int64_t>& pixels = pixels_entry.shape;
  const std::vector<int64_t>& labels = safetensors_entry(header, path, "labels").shape;
  // Converted to int64 and float32 when read: float ids would be truncated.
  for (const char* name : {"input_ids", "labels"}) {
    const at::ScalarType type = safetensors_entry(header, path, name).dtype;
    if (type != at::kLong && type != at::kInt) {
      throw std::runtime_error(fmt::format("{}: {} must hold integers (int64 or int32), not {}", path, name,
                                           c10::toString(type)));
    }
  }
  if (!at::isFloatingType(pixels_entry.dtype)) {
    throw std::runtime_error(fmt::format("{}: pixel_values must hold floats, not {}", path,
                                         c10::toString(pixels_entry.dtype)));
  }
  if (ids.size() != 2 || labels != ids) {
    throw std::runtime_error(path + ": input_ids and labels must both be [batch, sequence]");
  }
  if (ids[1] > c.llm.seq_len) {
    throw std::runtime_error(fmt::format("{}: sequences of {} tokens exceed llm.seq_len = {}", path, ids[1],
                                         c.llm.seq_len));
  }
  const std::vector<int64_t> image_shape{c.encoder.channels, c.encoder.image_size, c.encoder.image_size};
  if (pixels.size() != 4 || std::vector<int64_t>(pixels.begin() + 1, pixels.end()) != image_shape) {
    throw std::runtime_error(fmt::format("{}: pixel_values has shape [{}], expected [images, {}]", path,
                                         fmt::join(pixels, ", "), fmt::join(image_shape, ", ")));
  }
}

void check_finite_pixels(const at::Tensor& pixels, int64_t first, const std::string& path) {
  const at::Tensor finite = at::isfinite(pixels).flatten(1).all(1);
  if (finite.all().item<bool>()) return;
  const int64_t image = first + finite.logical_not().nonzero()[0].item<int64_t>();
  throw std::runtime_error(fmt::format("{}: pixel_values image {} holds a NaN or infinite value (as float32)", path,
                                       image));
}

std::vector<int64_t> checked_image_counts(const at::Tensor& counts, int64_t samples, int64_t images,
                                          const std::string& path) {
  if (counts.dim() != 1 || counts.size(0) != samples) {
    throw std::runtime_error(fmt::format("{}: image_counts has shape [{}], expected [{}] (one count a sample)", path,
                                         fmt::join(counts.sizes(), ", "), samples));
  }
  if (counts.scalar_type() != at::kLong && counts.scalar_type() != at::kInt) {
    throw std::runtime_error(fmt::format("{}: image_counts must hold integers (int64 or int32), not {}", path,
                                         c10::toString(counts.scalar_type())));
  }
  const at::Tensor as_long = counts.to(at::kLong).contiguous();
  std::vector<int64_t> out(as_long.data_ptr<int64_t>(), as_long.data_ptr<int64_t>() + samples);
  int64_t total = 0;
  for (size_t b = 0; b < out.size(); ++b) {
    if (out[b] < 0) throw std::runtime_error(fmt::format("{}: image_counts gives sample {} {} images", path, b, out[b]));
    total += out[b];
  }
  if (total != images) {
    throw std::runtime_error(fmt::format("{}: image_counts add up to {} images but pixel_values holds {}", path, total,
                                         images));
  }
  return out;
}

void check_image_count(int64_t counted, int64_t declared, const std::string& where) {
  if (counted != declared) {
    throw std::runtime_error(fmt::format("{} holds {} images by its placeholders, but its file's image_counts says {}",
                                         where, counted, declared));
  }
}

}  // namespace hetpar
