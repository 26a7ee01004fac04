// Where a training run's samples come from: the batch files of data.files
// (data/file_dataset.hpp) or the synthetic data (data/synthetic_data.hpp);
// and its held-out evaluation's (run.eval_every): data.eval_files, or the
// synthetic data's held-out stream.
#pragma once

#include <memory>
#include <optional>

#include "config/run_config.hpp"
#include "data/batch_source.hpp"

namespace hetpar {

std::unique_ptr<BatchSource> training_data(const RunConfig& config, const at::Device& device);
std::unique_ptr<BatchSource> held_out_data(const RunConfig& config, const at::Device& device);

// A directory of batch files opens, its headers fit the model, and it holds
// at least `needed` samples (`what` says which setting asks for them);
// throws std::runtime_error naming the directory or file otherwise.
void check_batch_files(const std::string& dir, const RunConfig& config, int64_t needed, const std::string& what);

// data.files' images a sample: the mean from the headers, and the most when
// every file has image_counts.
struct FileImageCounts {
  double mean = 0;
  std::optional<int64_t> most;
};

// Before any rank starts: data.files and data.eval_files open, their headers
// fit the model, they hold a step's samples (the held-out files every
// evaluation's), no more images a sample on average than data.images_max,
// and, in files with image_counts, no sample holding more; throws
// ConfigError naming the key otherwise. Training on files without counts
// holds each sample to data.images_max when it is read. Returns data.files'
// image counts from the same reading of the headers (none without data.files).
std::optional<FileImageCounts> check_data_files(const RunConfig& config);

// The config with data.files' image counts in data.files_images_per_sample
// (the FLOP count, step and memory models and planner then count the files'
// mean rather than the synthetic data's) and data.files_most_images (the
// memory model's fullest sample). The first reads the headers (throwing
// std::runtime_error naming a file that cannot be read); both leave a config
// without data.files unchanged.
RunConfig with_file_image_counts(RunConfig config);
RunConfig with_file_image_counts(RunConfig config, const std::optional<FileImageCounts>& counts);

}  // namespace hetpar
