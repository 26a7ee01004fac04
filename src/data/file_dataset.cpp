#include "data/file_dataset.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>
#include <stdexcept>

#include "data/batch_file_rows.hpp"

namespace hetpar {
std::vector<std::string> batch_files(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw std::runtime_error(dir + ": not a directory of batch files");
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file()) paths.push_back(e.path().string());
  }
  if (ec) throw std::runtime_error(dir + ": " + ec.message());
  if (paths.empty()) throw std::runtime_error(dir + ": holds no *.safetensors batch file");
  std::sort(paths.begin(), paths.end());
  return paths;
}

FileDataset::FileDataset(const std::string& dir, const RunConfig& config, const at::Device& device, bool shuffle,
                         uint64_t seed, ImagesPerSample cap)
    : BatchSource(config.encoder, config.llm, config.data.global_batch_size, device), dir_(dir), config_(config),
      shuffle_(shuffle), seed_(seed), cap_(cap) {
  for (const std::string& path : batch_files(dir)) {
    Shard shard{path, read_safetensors_header(path)};
    check_batch_header(shard.header, config, path);
    const SafetensorsEntry& ids = safetensors_entry(shard.header, path, "input_ids");
    const SafetensorsEntry& pixels = safetensors_entry(shard.header, path, "pixel_values");
    shard.first = samples_;
    shard.samples = ids.shape[0];
    if (shard.header.entries.count("image_counts") > 0) index_images(shard, pixels.shape[0]);
    samples_ += shard.samples;
    images_ += pixels.shape[0];
    if (shard.samples > 0) shards_.push_back(std::move(shard));
  }
  if (samples_ == 0) throw std::runtime_error(dir + ": its batch files hold no sample");
}

std::optional<int64_t> FileDataset::most_images() const {
  int64_t most = 0;
  for (const Shard& s : shards_) {
    if (s.image_counts.empty()) return std::nullopt;
    most = std::max(most, *std::max_element(s.image_counts.begin(), s.image_counts.end()));
  }
  return most;
}

const std::vector<int64_t>& FileDataset::epoch_order(int64_t epoch) const {
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  std::vector<int64_t> order(static_cast<size_t>(samples_));
  std::iota(order.begin(), order.end(), 0);
  std::seed_seq seq{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32), static_cast<uint32_t>(epoch),
                    static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 rng(seq);
  std::shuffle(order.begin(), order.end(), rng);
  while (orders_.size() >= 2) orders_.erase(orders_.begin());  // a step spans at most two epochs
  return orders_.emplace(epoch, std::move(order)).first->second;
}

FileDataset::Place FileDataset::place(int64_t step, int64_t sample) const {
  if (step < 1 || sample < 0 || sample >= global_batch_size_) {
    throw std::logic_error(fmt::format("sample {} of step {} is not in the dataset's steps", sample, step));
  }
  const int64_t position = (step - 1) * global_batch_size_ + sample;
  const int64_t epoch = position / samples_, within = position % samples_;
  const int64_t index = shuffle_ ? epoch_order(epoch)[static_cast<size_t>(within)] : within;
  const auto shard = std::upper_bound(shards_.begin(), shards_.end(), index,
                                      [](int64_t i, const Shard& s) { return i < s.first; }) - 1;
  return {&*shard, index - shard->first};
}

// Training holds each sample to data.images_max (the memory model and planner's bound).
// (The sample's name is formatted only for the error: at open this runs once a sample.)
void FileDataset::check_images_cap(int64_t images, const std::string& path, int64_t row) const {
  if (cap_ == ImagesPerSample::kAtMostImagesMax && images > config_.data.images_max) {
    throw std::runtime_error(fmt::format("{}: sample {} holds {} images, more than data.images_max = {}, the most the "
                                         "memory model and planner count a sample: raise data.images_max",
                                         path, row, images, config_.data.images_max));
  }
}

// A file with image_counts: its images indexed, and its fullest sample held to the cap, at open.
void FileDataset::index_images(Shard& shard, int64_t images) const {
  const at::Tensor counts = read_safetensors(shard.path, shard.header, {"image_counts"}).at("image_counts");
  shard.image_counts = checked_image_counts(counts, shard.samples, images, shard.path);
  shard.first_image.assign(shard.image_counts.size(), 0);
  int64_t total = 0;
  for (size_t b = 0; b < shard.image_counts.size(); ++b) {
    check_images_cap(shard.image_counts[b], shard.path, static_cast<int64_t>(b));
    shard.first_image[b] = total;
    total += shard.image_counts[b];
  }
}

// A file without image_counts: its input_ids read once to find each sample's first image.
const std::vector<int64_t>& FileDataset::first_images(const Shard& shard) const {
  if (!shard.first_image.empty()) return shard.first_image;
  const at::Tensor ids =
      read_safetensors_rows(shard.path, shard.header, "input_ids", 0, shard.samples).to(at::kLong).contiguous();
  const int64_t length = ids.size(1), tpi = config_.encoder.tokens_per_image();
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<int64_t> first(static_cast<size_t>(shard.samples));
  int64_t total = 0;
  for (int64_t b = 0; b < shard.samples; ++b) {
    first[static_cast<size_t>(b)] = total;
    total += std::count(id + b * length, id + (b + 1) * length, config_.llm.image_token_id) / tpi;
  }
  const int64_t pixels = safetensors_entry(shard.header, shard.path, "pixel_values").shape[0];
  if (total != pixels) {
    throw std::runtime_error(fmt::format("{}: {} image placeholders (token {}) but {} images of {} tokens",
                                         shard.path, total * tpi, config_.llm.image_token_id, pixels, tpi));
  }
  shard.first_image = std::move(first);
  return shard.first_image;
}

SampleText FileDataset::text(int64_t step, int64_t sample) const {
  if (step != cached_step_) {
    cached_.clear();
    cached_step_ = step;
  }
  if (const auto it = cached_.find(sample); it != cached_.end()) return it->second;
  const Place at = place(step, sample);
  const Shard& s = *at.shard;
  const at::Tensor ids = read_safetensors_rows(s.path, s.header, "input_ids", at.row, 1).to(at::kLong).contiguous();
  const at::Tensor labels = read_safetensors_rows(s.path, s.header, "labels", at.row, 1).to(at::kLong).contiguous();
  const std::string name = fmt::format("{}: sample {}", s.path, at.row);
  SampleText text = sample_from_rows(ids.data_ptr<int64_t>(), labels.data_ptr<int64_t>(), ids.size(1), config_, name);
  const auto images = static_cast<int64_t>(text.image_classes.size());
  if (!s.image_counts.empty()) check_image_count(images, s.image_counts[static_cast<size_t>(at.row)], name);
  check_images_cap(images, s.path, at.row);
  return cached_[sample] = std::move(text);
}

at::Tensor FileDataset::image(int64_t step, int64_t sample, int index, int /*image_class*/) const {
  const Place at = place(step, sample);
  const int64_t first = first_images(*at.shard)[static_cast<size_t>(at.row)];
  const at::Tensor pixels =
      read_safetensors_rows(at.shard->path, at.shard->header, "pixel_values", first + index, 1).to(at::kFloat);
  // Only a rank reads the pixels (the start checks headers): a NaN is named here, not left to the loss.
  check_finite_pixels(pixels, first + index, at.shard->path);
  return pixels[0];
}

std::string FileDataset::description() const {
  const double steps = static_cast<double>(samples_) / static_cast<double>(global_batch_size_);
  return fmt::format("{} samples in {} batch files of {}, {:.3g} steps an epoch, {}", samples_, shards_.size(), dir_,
                     steps, shuffle_ ? "each epoch shuffled" : "in the files' order");
}

}  // namespace hetpar
