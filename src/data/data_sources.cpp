#include "data/data_sources.hpp"

#include <fmt/format.h>

#include "config/config_error.hpp"
#include "data/file_dataset.hpp"
#include "data/synthetic_data.hpp"

namespace hetpar {
namespace {

uint64_t seed_of(const RunConfig& config) { return static_cast<uint64_t>(config.run.seed); }

}  // namespace

std::unique_ptr<BatchSource> training_data(const RunConfig& config, const at::Device& device) {
  if (!config.data.files.empty()) {
    return std::make_unique<FileDataset>(config.data.files, config, device, config.data.shuffle, seed_of(config),
                                         ImagesPerSample::kAtMostImagesMax);
  }
  return std::make_unique<SyntheticData>(config.encoder, config.llm, config.data, seed_of(config), device);
}

std::unique_ptr<BatchSource> held_out_data(const RunConfig& config, const at::Device& device) {
  // Held-out batches are the same at every evaluation: the files in their order.
  if (!config.data.eval_files.empty()) {
    return std::make_unique<FileDataset>(config.data.eval_files, config, device, /*shuffle=*/false, seed_of(config),
                                         ImagesPerSample::kAtMostImagesMax);
  }
  return std::make_unique<SyntheticData>(config.encoder, config.llm, config.data, seed_of(config), device,
                                         DataStream::kHeldOut);
}

namespace {

// The files' headers, read and checked (and their image_counts, where they have them).
FileDataset headers_of(const std::string& dir, const RunConfig& config, ImagesPerSample cap = ImagesPerSample::kAny) {
  return FileDataset(dir, config, at::kCPU, /*shuffle=*/false, seed_of(config), cap);
}

double images_per_sample(const FileDataset& files) {
  return static_cast<double>(files.images()) / static_cast<double>(files.samples());
}

}  // namespace

// The files hold at least `needed` samples (`what` says which setting asks for them).
void check_enough_samples(const FileDataset& files, const std::string& dir, int64_t needed, const std::string& what) {
  if (files.samples() < needed) {
    throw std::runtime_error(fmt::format("{} holds {} samples in {} files, fewer than {} = {}", dir, files.samples(),
                                         files.files(), what, needed));
  }
}

void check_batch_files(const std::string& dir, const RunConfig& config, int64_t needed, const std::string& what) {
  check_enough_samples(headers_of(dir, config), dir, needed, what);
}

std::optional<FileImageCounts> check_data_files(const RunConfig& config) {
  const auto check = [&](const std::string& dir, const char* key, int64_t needed,
                         const std::string& what) -> std::optional<FileImageCounts> {
    if (dir.empty()) return std::nullopt;
    try {
      // Files with image_counts: a sample above images_max is named now.
      const FileDataset files = headers_of(dir, config, ImagesPerSample::kAtMostImagesMax);
      check_enough_samples(files, dir, needed, what);
      // Files without: each sample is held to images_max when read; a mean above it fails sooner or later, so now.
      if (const double mean = images_per_sample(files); mean > double(config.data.images_max)) {
        throw std::runtime_error(fmt::format("{}: images per sample {:.3g} on average, more than data.images_max = "
                                             "{}, the most the memory model and planner count a sample: raise "
                                             "data.images_max", dir, mean, config.data.images_max));
      }
      return FileImageCounts{images_per_sample(files), files.most_images()};
    } catch (const std::runtime_error& e) {
      throw ConfigError(config.source_file, key, e.what());
    }
  };
  const int64_t batch = config.data.global_batch_size;
  const std::optional<FileImageCounts> counts = check(config.data.files, "data.files", batch, "data.global_batch_size");
  check(config.data.eval_files, "data.eval_files", config.run.eval_batches * batch,
        "run.eval_batches x data.global_batch_size");
  return counts;
}

RunConfig with_file_image_counts(RunConfig config) {
  if (config.data.files.empty()) return config;
  const FileDataset files = headers_of(config.data.files, config);
  const FileImageCounts counts{images_per_sample(files), files.most_images()};
  return with_file_image_counts(std::move(config), counts);
}

RunConfig with_file_image_counts(RunConfig config, const std::optional<FileImageCounts>& counts) {
  if (config.data.files.empty() || !counts) return config;
  config.data.files_images_per_sample = counts->mean;
  config.data.files_most_images = counts->most;
  return config;
}

}  // namespace hetpar
