// Samples from a directory of batch files (data.files, and data.eval_files
// for held-out evaluation): every *.safetensors file in it, in name order,
// each in the batch-file format (data/file_batch.hpp, data/batch_file_rows.hpp)
// with any number of samples. The dataset's samples, file after file, make
// epochs; step s takes samples (s - 1) * B to s * B - 1 of the run of epochs
// (B = data.global_batch_size), an epoch's last step running on into the
// next. Each epoch's order is the files' order, or with `shuffle` a
// permutation drawn from (seed, epoch): the same on every rank and after a
// resume.
//
// A rank reads only what it asks for: a sample's rows of input_ids and
// labels, an image's rows of pixel_values, and where each sample's images
// start: from the file's image_counts when it has them (read at open), else
// from its input_ids, read once the first time the file is touched.
// The headers are read (and checked) when the dataset is opened; a sample
// that breaks the format is named (file, sample) when first read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_source.hpp"
#include "io/safetensors.hpp"

namespace hetpar {

// The batch files of `dir` in name order; throws naming `dir` when it is no
// directory or holds none.
std::vector<std::string> batch_files(const std::string& dir);

// Training counts on data.images_max: the memory model and planner bound a
// sample's images by it. A capped dataset refuses a sample that holds more,
// naming it: at open when its file has image_counts, else when it is read.
enum class ImagesPerSample { kAny, kAtMostImagesMax };

class FileDataset : public BatchSource {
 public:
  // Throws std::runtime_error naming the directory or file when the directory
  // is missing or holds no batch file, or a file's header does not fit the model.
  FileDataset(const std::string& dir, const RunConfig& config, const at::Device& device, bool shuffle, uint64_t seed,
              ImagesPerSample cap = ImagesPerSample::kAny);
  SampleText text(int64_t step, int64_t sample) const override;
  at::Tensor image(int64_t step, int64_t sample, int index, int image_class) const override;
  std::string description() const override;

  int64_t samples() const { return samples_; }
  int64_t images() const { return images_; }  // in all files, from their headers
  // The fullest sample's images when every file has image_counts.
  std::optional<int64_t> most_images() const;
  int64_t files() const { return static_cast<int64_t>(shards_.size()); }

 private:
  struct Shard {
    std::string path;
    SafetensorsHeader header;
    int64_t first = 0;  // its first sample's index in the dataset
    int64_t samples = 0;
    std::vector<int64_t> image_counts;         // by sample, from the file; empty when it has none
    mutable std::vector<int64_t> first_image;  // by sample; at open from image_counts, else at first touch
  };
  struct Place {
    const Shard* shard;
    int64_t row;
  };
  Place place(int64_t step, int64_t sample) const;
  const std::vector<int64_t>& first_images(const Shard& shard) const;
  void index_images(Shard& shard, int64_t images) const;
  void check_images_cap(int64_t images, const std::string& path, int64_t row) const;
  const std::vector<int64_t>& epoch_order(int64_t epoch) const;

  std::string dir_;
  RunConfig config_;
  bool shuffle_;
  uint64_t seed_;
  ImagesPerSample cap_;
  std::vector<Shard> shards_;
  int64_t samples_ = 0;
  int64_t images_ = 0;
  mutable std::map<int64_t, std::vector<int64_t>> orders_;  // shuffled epochs, the latest two kept
  // The latest step's samples as read: a step asks for each several times
  // (the loss divisor, the routing plan, the micro-batch), each a file read.
  mutable int64_t cached_step_ = 0;
  mutable std::map<int64_t, SampleText> cached_;
};

}  // namespace hetpar
