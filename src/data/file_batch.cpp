#include "data/file_batch.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <stdexcept>

#include "data/batch_file_rows.hpp"
#include "io/safetensors.hpp"

namespace hetpar {

std::pair<int64_t, int64_t> batch_file_shape(const std::string& path) {
  // The header says it: the images need not be read.
  const SafetensorsHeader header = read_safetensors_header(path);
  const std::vector<int64_t>& shape = safetensors_entry(header, path, "input_ids").shape;
  if (shape.size() != 2) throw std::runtime_error(path + ": input_ids must be [batch, sequence]");
  return {shape[0], shape[1]};
}

FileBatch::FileBatch(const std::string& path, const RunConfig& c, const at::Device& device)
    : BatchSource(c.encoder, c.llm, 0, device) {
  const SafetensorsHeader header = read_safetensors_header(path);
  check_batch_header(header, c, path);
  std::vector<std::string> names{"input_ids", "labels", "pixel_values"};
  if (header.entries.count("image_counts") > 0) names.emplace_back("image_counts");
  const auto tensors = read_safetensors(path, header, names);
  const at::Tensor ids = tensors.at("input_ids").to(at::kLong).contiguous();
  const at::Tensor labels = tensors.at("labels").to(at::kLong).contiguous();
  pixels_ = tensors.at("pixel_values").to(at::kFloat);
  check_finite_pixels(pixels_, 0, path);
  const int64_t length = ids.size(1);
  const auto counts = tensors.find("image_counts");
  const std::vector<int64_t> declared =
      counts == tensors.end() ? std::vector<int64_t>{}
                              : checked_image_counts(counts->second, ids.size(0), pixels_.size(0), path);
  int64_t images = 0, target_count = 0;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    const std::string where = fmt::format("{}: sample {}", path, b);
    SampleText t = sample_from_rows(ids.data_ptr<int64_t>() + b * length, labels.data_ptr<int64_t>() + b * length,
                                    length, c, where);
    if (!declared.empty()) check_image_count(static_cast<int64_t>(t.image_classes.size()), declared[b], where);
    for (const int64_t target : t.targets) target_count += target >= 0;
    first_image_.push_back(images);
    images += static_cast<int64_t>(t.image_classes.size());
    texts_.push_back(std::move(t));
  }
  if (images != pixels_.size(0)) {
    throw std::runtime_error(fmt::format("{}: {} image placeholders (token {}) but {} images of {} tokens", path,
                                         images * c.encoder.tokens_per_image(), c.llm.image_token_id,
                                         pixels_.size(0), c.encoder.tokens_per_image()));
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

std::string FileBatch::description() const { return fmt::format("{} samples of one batch file", samples()); }

}  // namespace hetpar
