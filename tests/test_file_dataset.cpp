// Training samples from a directory of batch files (data.files): steps walk
// the files' samples in order or in a per-epoch shuffle, reading only the
// rows they need; bad files are named; and a run on files holding the
// synthetic data's samples is the synthetic run to the bit, under a
// heterogeneous layout, held-out evaluation included.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <tuple>

#include "config/config_error.hpp"
#include "data/data_sources.hpp"
#include "data/file_batch.hpp"
#include "data/file_dataset.hpp"
#include "data/synthetic_data.hpp"
#include "io/safetensors.hpp"
#include "metrics/model_flops.hpp"
#include "plan/memory_model.hpp"
#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

const std::string kHetpar = hetpar_binary();
const std::string kTiny = source_tree_path("/workloads/tiny.toml");

std::string fresh_dir(const std::string& tag) {
  const std::string dir = ::testing::TempDir() + "/file_dataset_" + tag + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Samples as a batch file holds them: transformers' unshifted labels.
struct FileSample {
  std::vector<int64_t> ids, labels;
  std::vector<at::Tensor> images;  // [C, H, W] each
};

// With `image_counts`, the file holds that tensor too (batch_files.py writes each sample's count).
void write_batch_file(const std::string& path, const std::vector<FileSample>& samples, const RunConfig& c,
                      const std::optional<at::Tensor>& image_counts = std::nullopt) {
  const auto length = static_cast<int64_t>(samples.at(0).ids.size());
  at::Tensor ids = at::empty({static_cast<int64_t>(samples.size()), length}, at::kLong);
  at::Tensor labels = at::empty_like(ids);
  std::vector<at::Tensor> images;
  for (size_t b = 0; b < samples.size(); ++b) {
    std::copy(samples[b].ids.begin(), samples[b].ids.end(), ids[b].data_ptr<int64_t>());
    std::copy(samples[b].labels.begin(), samples[b].labels.end(), labels[b].data_ptr<int64_t>());
    images.insert(images.end(), samples[b].images.begin(), samples[b].images.end());
  }
  const at::Tensor pixels = images.empty() ? at::empty({0, c.encoder.channels, c.encoder.image_size, c.encoder.image_size})
                                           : at::stack(images);
  std::vector<std::pair<std::string, at::Tensor>> tensors{{"input_ids", ids}, {"labels", labels}, {"pixel_values", pixels}};
  if (image_counts) tensors.emplace_back("image_counts", *image_counts);
  write_safetensors(path, tensors);
}

// Each sample's own count, as batch_files.py writes it.
at::Tensor counts_of(const std::vector<FileSample>& samples) {
  at::Tensor counts = at::empty({static_cast<int64_t>(samples.size())}, at::kLong);
  for (size_t b = 0; b < samples.size(); ++b) counts[b] = static_cast<int64_t>(samples[b].images.size());
  return counts;
}

// Sample `n` of a hand-made dataset: its number in the first text token, `images` images of value n + i.
FileSample numbered(int64_t n, int images, const RunConfig& c) {
  FileSample s;
  const int64_t tpi = c.encoder.tokens_per_image();
  s.ids = {1, 10 + n};
  for (int i = 0; i < images; ++i) {
    s.ids.insert(s.ids.end(), tpi, c.llm.image_token_id);
    s.images.push_back(at::full({c.encoder.channels, c.encoder.image_size, c.encoder.image_size}, double(n) + i * 0.5));
  }
  while (static_cast<int64_t>(s.ids.size()) < 40) s.ids.push_back(200);
  s.labels = s.ids;
  s.labels[0] = -100;
  return s;
}

RunConfig tiny_config(int64_t global_batch) {
  return load_run_config(kTiny, {"data.global_batch_size=" + std::to_string(global_batch)});
}

// Three files of 3, 2 and 4 samples (9 in all), sample n holding n % 3 images;
// `counted`: each file with its image_counts.
std::string numbered_dataset(const std::string& tag, const RunConfig& c, bool counted = false) {
  const std::string dir = fresh_dir(tag);
  int64_t n = 0;
  for (const auto& [name, count] : {std::pair{"a.safetensors", 3}, std::pair{"b.safetensors", 2}, std::pair{"c.safetensors", 4}}) {
    std::vector<FileSample> samples;
    for (int i = 0; i < count; ++i, ++n) samples.push_back(numbered(n, static_cast<int>(n % 3), c));
    write_batch_file(dir + "/" + name, samples, c, counted ? std::optional(counts_of(samples)) : std::nullopt);
  }
  std::ofstream(dir + "/notes.txt") << "not a batch file: left out\n";
  return dir;
}

int64_t number_of(const SampleText& t) { return t.ids.at(1) - 10; }

TEST(FileDataset, StepsWalkTheFilesInOrderAndRunOnIntoTheNextEpoch) {
  const RunConfig c = tiny_config(4);
  const FileDataset data(numbered_dataset("order", c), c, at::kCPU, /*shuffle=*/false, 1);
  EXPECT_EQ(data.samples(), 9);
  EXPECT_EQ(data.files(), 3);
  std::vector<int64_t> seen;
  for (int64_t step = 1; step <= 3; ++step) {
    for (int64_t i = 0; i < 4; ++i) seen.push_back(number_of(data.text(step, i)));
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2}));
  // Pre-shifted targets, padded to llm.seq_len with no target.
  const SampleText t = data.text(1, 2);
  ASSERT_EQ(static_cast<int64_t>(t.ids.size()), c.llm.seq_len);
  EXPECT_EQ(t.targets[0], 12);
  EXPECT_EQ(t.ids[50], 0);
  EXPECT_EQ(t.targets[39], -100);
  EXPECT_EQ(t.image_classes.size(), 2u);
  // Sample 5 (file b's second) holds two images: pixel rows 1 and 2 of its file.
  EXPECT_TRUE(at::equal(data.image(2, 1, 0, 0), at::full({3, 32, 32}, 5.0f)));
  EXPECT_TRUE(at::equal(data.image(2, 1, 1, 0), at::full({3, 32, 32}, 5.5f)));
  const MicroBatch batch = data.micro_batch(2, 0, 4);  // samples 4..7: 1 + 2 + 0 + 1 images
  EXPECT_EQ(batch.images, 4);
  EXPECT_TRUE(at::equal(batch.pixels[3], at::full({3, 32, 32}, 7.0f)));
}

TEST(FileDataset, ShuffledEpochsArePermutationsDrawnFromTheSeed) {
  const RunConfig c = tiny_config(4);
  const std::string dir = numbered_dataset("shuffle", c);
  const FileDataset data(dir, c, at::kCPU, /*shuffle=*/true, 7), again(dir, c, at::kCPU, true, 7),
      other_seed(dir, c, at::kCPU, true, 8);
  std::vector<int64_t> order, other;
  for (int64_t step = 1; step <= 9; ++step) {  // 36 samples: four epochs
    for (int64_t i = 0; i < 4; ++i) {
      order.push_back(number_of(data.text(step, i)));
      EXPECT_EQ(order.back(), number_of(again.text(step, i)));
      other.push_back(number_of(other_seed.text(step, i)));
    }
  }
  std::vector<std::vector<int64_t>> epochs;
  for (size_t e = 0; e < 4; ++e) {
    epochs.emplace_back(order.begin() + e * 9, order.begin() + (e + 1) * 9);
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8})) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(order, other);
  // Images follow their samples wherever the shuffle puts them.
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t n = number_of(data.text(3, i));
    if (n % 3 > 0) EXPECT_TRUE(at::equal(data.image(3, i, 0, 0), at::full({3, 32, 32}, float(n))));
  }
}

// `what` happens to the error's text.
void expect_error(const std::function<void()>& run, const std::string& what) {
  try {
    run();
    ADD_FAILURE() << "no error; expected one saying " << what;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(FileDataset, BadDirectoriesAndFilesAreNamed) {
  const RunConfig c = tiny_config(4);
  const std::string empty = fresh_dir("empty");
  expect_error([&] { FileDataset(empty + "/missing", c, at::kCPU, false, 1); }, "missing: not a directory of batch files");
  expect_error([&] { FileDataset(empty, c, at::kCPU, false, 1); }, "holds no *.safetensors batch file");
  // Images of another size: refused from the header, before any sample is read.
  const std::string small = fresh_dir("small_images");
  RunConfig other = c;
  other.encoder.image_size = 16;
  write_batch_file(small + "/a.safetensors", {numbered(0, 1, other)}, other);
  expect_error([&] { FileDataset(small, c, at::kCPU, false, 1); }, "pixel_values has shape [1, 3, 16, 16], expected [images, 3, 32, 32]");
  // A broken placeholder run: named by file and sample when the sample is read.
  const std::string broken = fresh_dir("broken_run");
  FileSample bad = numbered(1, 1, c);
  bad.ids[5] = 300;
  write_batch_file(broken + "/a.safetensors", {numbered(0, 0, c), bad, numbered(2, 0, c), numbered(3, 0, c)}, c);
  const FileDataset data(broken, c, at::kCPU, false, 1);
  EXPECT_EQ(number_of(data.text(1, 0)), 0);
  expect_error([&] { data.text(1, 1); }, "a.safetensors: sample 1: the image placeholders (token 2) at positions 4 and 6 break a run of 16");
  // More images than placeholders: named when the file's images are first looked up.
  const std::string extra = fresh_dir("extra_image");
  FileSample more = numbered(0, 1, c);
  more.images.push_back(more.images[0]);
  write_batch_file(extra + "/a.safetensors", {more}, c);
  const FileDataset with_extra(extra, c, at::kCPU, false, 1);
  expect_error([&] { with_extra.image(1, 0, 0, 0); }, "16 image placeholders (token 2) but 2 images of 16 tokens");
}

// A safetensors file with a header written by hand (`header` as JSON) and `data_bytes` zero bytes after it.
void write_raw_safetensors(const std::string& path, const nlohmann::json& header, size_t data_bytes) {
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), sizeof length);
  out << text << std::string(data_bytes, '\0');
}

// input_ids and labels of shape `shape` (int64) at `offsets`, and no image.
nlohmann::json batch_header(const nlohmann::json& shape, const nlohmann::json& offsets) {
  return {{"input_ids", {{"dtype", "I64"}, {"shape", shape}, {"data_offsets", offsets}}},
          {"labels", {{"dtype", "I64"}, {"shape", shape}, {"data_offsets", offsets}}},
          {"pixel_values", {{"dtype", "F32"}, {"shape", {0, 3, 32, 32}}, {"data_offsets", {0, 0}}}}};
}

// A header whose shape is negative, or whose byte count wraps around to the
// offsets', or whose offsets lie past the file's end, is refused by name: it
// would count negative samples (dropping others) or crash a rank.
TEST(FileDataset, HeadersWhoseShapesOrOffsetsDoNotFitTheFileAreRefused) {
  const RunConfig c = tiny_config(4);
  const std::string dir = fresh_dir("bad_headers");
  const std::string negative = dir + "/negative.safetensors", wraps = dir + "/wraps.safetensors",
                    past_end = dir + "/past_end.safetensors";
  write_raw_safetensors(negative, batch_header({-4, -64}, {0, 2048}), 2048);
  write_raw_safetensors(wraps, batch_header({int64_t{1} << 62, 4}, {0, 0}), 0);
  write_raw_safetensors(past_end, batch_header({4, 64}, {0, 2048}), 1024);
  expect_error([&] { read_safetensors_header(negative); },
               "negative.safetensors: tensor input_ids has shape [-4, -64]: a dimension is negative");
  expect_error([&] { read_safetensors_header(wraps); },
               "wraps.safetensors: tensor input_ids has shape [4611686018427387904, 4]: more bytes than a file can hold");
  expect_error([&] { read_safetensors_header(past_end); },
               "past_end.safetensors: tensor input_ids has data_offsets [0,2048], past the end of the file's 1024 data bytes");
  write_raw_safetensors(past_end, batch_header({4, 64}, {0, 1024}), 2048);
  expect_error([&] { read_safetensors_header(past_end); },
               "tensor input_ids has data_offsets [0,1024], but its shape [4, 64] of Long takes 2048 bytes");
  // Beside a good file, as data.files: refused before any rank starts, naming the file.
  const std::string files = numbered_dataset("bad_headers_files", c);
  std::filesystem::copy_file(negative, files + "/d.safetensors");
  const auto [code, out] = run_command(kHetpar + " train " + kTiny + " --set run.steps=1 --set data.files=" + files +
                                       " --out " + dir + "/run");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("data.files: " + files + "/d.safetensors: tensor input_ids has shape [-4, -64]"), std::string::npos) << out;
  EXPECT_EQ(out.find("launching"), std::string::npos) << out;
}

// A file of two samples of one image each, its tensor `name` then replaced by `edit` of it.
std::string edited_batch_file(const std::string& tag, const RunConfig& c, const std::string& name,
                              const std::function<at::Tensor(at::Tensor)>& edit) {
  const std::string dir = fresh_dir(tag);
  write_batch_file(dir + "/a.safetensors", {numbered(0, 1, c), numbered(1, 1, c)}, c);
  auto tensors = read_safetensors(dir + "/a.safetensors");
  tensors[name] = edit(tensors.at(name));
  write_safetensors(dir + "/a.safetensors", {tensors.begin(), tensors.end()});
  return dir;
}

// One file (eval --batch FILE) and a directory (data.files, eval --batch DIR)
// check the tensors' types alike, read as int64 and float32: float ids would
// be truncated, integer pixels taken as floats. Pixels of any float type.
TEST(FileDataset, AFileAndADirectoryRefuseTheSameTypesAndTakeFloat64Pixels) {
  const RunConfig c = tiny_config(2);
  for (const auto& [tag, name, edit, what] : {
           std::tuple<std::string, std::string, std::function<at::Tensor(at::Tensor)>, std::string>{
               "float_ids", "input_ids", [](const at::Tensor& t) { return t.to(at::kFloat) + 0.9; },
               "a.safetensors: input_ids must hold integers (int64 or int32), not Float"},
           {"int_pixels", "pixel_values", [](const at::Tensor& t) { return t.to(at::kInt); },
            "a.safetensors: pixel_values must hold floats, not Int"}}) {
    const std::string dir = edited_batch_file(tag, c, name, edit);
    expect_error([&] { FileBatch(dir + "/a.safetensors", c, at::kCPU); }, what);
    expect_error([&] { FileDataset(dir, c, at::kCPU, false, 1); }, what);
  }
  const std::string f64 = edited_batch_file("f64_pixels", c, "pixel_values", [](const at::Tensor& t) { return t.to(at::kDouble); });
  const at::Tensor image = numbered(1, 1, c).images[0];
  EXPECT_TRUE(FileBatch(f64 + "/a.safetensors", c, at::kCPU).image(1, 1, 0, 0).equal(image));
  EXPECT_TRUE(FileDataset(f64, c, at::kCPU, false, 1).image(1, 1, 0, 0).equal(image));
}

// A NaN or infinite pixel (1e300 in float64 is infinite as float32) is named
// by file and image: one file's whole at its check, a directory's image when
// a rank reads it (the start reads only headers).
TEST(FileDataset, NonFinitePixelsAreNamed) {
  const RunConfig c = tiny_config(2);
  for (const double bad : {std::nan(""), 1e300}) {
    const std::string dir = edited_batch_file("non_finite", c, "pixel_values", [&](const at::Tensor& t) {
      at::Tensor out = t.to(at::kDouble);
      out[1][2][3][4] = bad;
      return out;
    });
    const std::string what = "a.safetensors: pixel_values image 1 holds a NaN or infinite value (as float32)";
    expect_error([&] { FileBatch(dir + "/a.safetensors", c, at::kCPU); }, what);
    const FileDataset files(dir, c, at::kCPU, false, 1);
    EXPECT_TRUE(files.image(1, 0, 0, 0).isfinite().all().item<bool>());
    expect_error([&] { files.image(1, 1, 0, 0); }, what);
  }
}

// check_data_files refuses `c`, naming data.files and saying `what`.
void expect_refused_files(const RunConfig& c, const std::string& what) {
  try {
    check_data_files(c);
    ADD_FAILURE() << "accepted; expected an error saying " << what;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.files");
    EXPECT_NE(e.reason().find(what), std::string::npos) << e.what();
  }
}

TEST(FileDataset, TooFewSamplesForAStepIsAConfigError) {
  RunConfig c = tiny_config(16);
  c.data.files = numbered_dataset("too_few", c);
  expect_refused_files(c, "holds 9 samples in 3 files, fewer than data.global_batch_size = 16");
}

TEST(FileDataset, TheFilesMeanImagesASampleIsWhatTheModelsCount) {
  RunConfig c = tiny_config(4);
  c.data.images_min = 0;
  c.data.images_max = 2;
  c.data.files = numbered_dataset("image_counts", c);  // 9 samples holding 0, 1, 2, 0, ... images: 9 in all
  EXPECT_EQ(with_file_image_counts(c).data.files_images_per_sample, 1.0);
  c.data.images_max = 4;  // the synthetic data's expected count would be 2 a sample; the files' is 1
  const RunConfig measured = with_file_image_counts(c);
  EXPECT_DOUBLE_EQ(expected_images_per_step(measured), 4 * 1.0);
  EXPECT_NO_THROW(check_data_files(measured));
  RunConfig synthetic = c;
  synthetic.data.files.clear();
  EXPECT_FALSE(with_file_image_counts(synthetic).data.files_images_per_sample.has_value());
  EXPECT_DOUBLE_EQ(expected_images_per_step(with_file_image_counts(synthetic)), 4 * 2.0);
}

// With image_counts in every file the memory model bounds a sample by the
// fullest one (2 images here) rather than data.images_max (4); without, by
// data.images_max, which training holds each sample to.
TEST(FileDataset, TheFullestSampleBoundsTheMemoryModelWhereImageCountsSayIt) {
  RunConfig c = tiny_config(4);
  c.data.images_min = 0;
  c.data.images_max = 4;
  c.data.files = numbered_dataset("most_scanned", c);
  const std::optional<FileImageCounts> scanned = check_data_files(c);
  ASSERT_TRUE(scanned.has_value());
  EXPECT_EQ(scanned->mean, 1.0);
  EXPECT_FALSE(scanned->most.has_value());
  const RunConfig capped = with_file_image_counts(c, scanned);
  EXPECT_EQ(most_images_per_sample(capped), 4);

  c.data.files = numbered_dataset("most_counted", c, /*counted=*/true);
  const std::optional<FileImageCounts> counted = check_data_files(c);
  ASSERT_TRUE(counted.has_value() && counted->most.has_value());
  EXPECT_EQ(*counted->most, 2);
  const RunConfig bounded = with_file_image_counts(c, counted);
  EXPECT_EQ(bounded.data.files_most_images, 2);
  EXPECT_EQ(with_file_image_counts(c).data.files_most_images, 2);  // reading the headers itself: the same
  EXPECT_EQ(most_images_per_sample(bounded), 2);

  // The memory model: as synthetic data of at most 2 images a sample, less than at 4.
  RunConfig two = c;
  two.data.files.clear();
  two.data.images_max = 2;
  const MemoryAssumptions a{4, 0, false};
  const RankMemory got = rank_memory(bounded, a).front(), want = rank_memory(two, a).front();
  EXPECT_EQ(got.activations, want.activations);
  EXPECT_EQ(got.transient, want.transient);
  EXPECT_LT(got.activations, rank_memory(capped, a).front().activations);
  RunConfig none = c;
  none.data.files.clear();
  EXPECT_FALSE(check_data_files(none).has_value());
}

TEST(FileDataset, TrainingHoldsEachSampleToImagesMax) {
  RunConfig c = tiny_config(4);
  c.data.images_max = 1;  // the files' mean is 1, so the preflight passes; samples 2, 5 and 8 hold 2 images each
  c.data.shuffle = false;
  c.data.files = numbered_dataset("images_cap", c);
  EXPECT_NO_THROW(check_data_files(c));
  const std::unique_ptr<BatchSource> training = training_data(c, at::kCPU);
  EXPECT_EQ(training->text(1, 1).image_classes.size(), 1u);
  expect_error([&] { training->text(1, 2); },
               "a.safetensors: sample 2 holds 2 images, more than data.images_max = 1, the most the memory model and "
               "planner count a sample: raise data.images_max");
  // hetpar eval reads any count: it plans nothing.
  const FileDataset uncapped(c.data.files, c, at::kCPU, false, 1);
  EXPECT_EQ(uncapped.text(1, 2).image_classes.size(), 2u);
  // A mean above images_max is refused before any rank starts.
  c.data.images_max = 0;
  expect_refused_files(c, ": images per sample 1 on average, more than data.images_max = 0");
}

TEST(FileDataset, ImageCountsIndexTheSameImagesAndHoldEachSampleToImagesMaxAtOpen) {
  RunConfig c = tiny_config(4);
  c.data.images_min = 0;
  c.data.images_max = 2;
  c.data.shuffle = false;
  const FileDataset scanned(numbered_dataset("counts_scanned", c), c, at::kCPU, true, 3);
  c.data.files = numbered_dataset("counts_counted", c, /*counted=*/true);
  const FileDataset counted(c.data.files, c, at::kCPU, true, 3);
  for (int64_t step = 1; step <= 5; ++step) {  // two epochs and a bit, shuffled
    for (int64_t i = 0; i < 4; ++i) {
      const SampleText t = counted.text(step, i);
      ASSERT_EQ(t.ids, scanned.text(step, i).ids);
      for (size_t k = 0; k < t.image_classes.size(); ++k) {
        EXPECT_TRUE(at::equal(counted.image(step, i, int(k), 0), scanned.image(step, i, int(k), 0)));
      }
    }
  }
  EXPECT_EQ(with_file_image_counts(c).data.files_images_per_sample, 1.0);
  // The fullest sample (2 images) against images_max = 1: named at open, though the mean (1) fits.
  c.data.images_max = 1;
  const std::string over = "a.safetensors: sample 2 holds 2 images, more than data.images_max = 1";
  expect_refused_files(c, over);
  expect_error([&] { training_data(c, at::kCPU); }, over);
  RunConfig held_out = c;
  held_out.data.eval_files = c.data.files;
  expect_error([&] { held_out_data(held_out, at::kCPU); }, over);
  EXPECT_NO_THROW(FileDataset(c.data.files, c, at::kCPU, false, 1));  // hetpar eval takes any count
}

TEST(FileDataset, ImageCountsThatDisagreeWithTheFileAreNamed) {
  const RunConfig c = tiny_config(2);
  const std::vector<FileSample> samples{numbered(0, 1, c), numbered(1, 0, c)};
  const auto open_with = [&](const std::string& tag, const at::Tensor& counts) {
    const std::string dir = fresh_dir(tag);
    write_batch_file(dir + "/a.safetensors", samples, c, counts);
    return FileDataset(dir, c, at::kCPU, false, 1);
  };
  expect_error([&] { open_with("counts_sum", at::tensor({1, 1}, at::kLong)); },
               "a.safetensors: image_counts add up to 2 images but pixel_values holds 1");
  expect_error([&] { open_with("counts_shape", at::tensor({1}, at::kLong)); },
               "a.safetensors: image_counts has shape [1], expected [2] (one count a sample)");
  expect_error([&] { open_with("counts_type", at::tensor({1.0f, 0.0f})); },
               "a.safetensors: image_counts must hold integers (int64 or int32), not Float");
  expect_error([&] { open_with("counts_negative", at::tensor({2, -1}, at::kInt)); },
               "a.safetensors: image_counts gives sample 1 -1 images");
  // The right sum on the wrong samples: named when the sample is read, not trusted.
  const FileDataset swapped = open_with("counts_swapped", at::tensor({0, 1}, at::kLong));
  expect_error([&] { swapped.text(1, 0); },
               "a.safetensors: sample 0 holds 1 images by its placeholders, but its file's image_counts says 0");
  // hetpar eval's single batch file checks them the same way.
  const std::string dir = fresh_dir("counts_one_file");
  write_batch_file(dir + "/a.safetensors", samples, c, at::tensor({0, 1}, at::kLong));
  expect_error([&] { FileBatch(dir + "/a.safetensors", c, at::kCPU); },
               "a.safetensors: sample 0 holds 1 images by its placeholders, but its file's image_counts says 0");
  write_batch_file(dir + "/b.safetensors", samples, c, counts_of(samples));
  EXPECT_EQ(FileBatch(dir + "/b.safetensors", c, at::kCPU).samples(), 2);
}

// The synthetic data's samples of steps 1..steps, written as batch files of
// `per_file` samples each (the last file shorter).
void write_synthetic_steps(const std::string& dir, const RunConfig& c, DataStream stream, int64_t steps, int per_file) {
  const SyntheticData synthetic(c.encoder, c.llm, c.data, static_cast<uint64_t>(c.run.seed), at::kCPU, stream);
  std::vector<FileSample> samples;
  int file = 0;
  const auto flush = [&] {
    write_batch_file(fmt::format("{}/part_{:03d}.safetensors", dir, file++), samples, c);
    samples.clear();
  };
  for (int64_t step = 1; step <= steps; ++step) {
    for (int64_t i = 0; i < c.data.global_batch_size; ++i) {
      const SampleText t = synthetic.text(step, i);
      FileSample s{t.ids, std::vector<int64_t>(t.ids.size(), -100)};
      for (size_t p = 0; p + 1 < t.targets.size(); ++p) s.labels[p + 1] = t.targets[p];
      for (size_t k = 0; k < t.image_classes.size(); ++k) {
        s.images.push_back(synthetic.image(step, i, static_cast<int>(k), t.image_classes[k]));
      }
      samples.push_back(std::move(s));
      if (static_cast<int>(samples.size()) == per_file) flush();
    }
  }
  if (!samples.empty()) flush();
}

std::vector<nlohmann::json> run_steps(const std::string& tag, const std::string& sets) {
  const std::string out = fresh_dir(tag);
  const auto [code, output] = run_command(kHetpar + " train " + kTiny + " --set run.steps=6 --set data.global_batch_size=4 "
                                          "--set data.micro_batch_size=1 --set run.eval_every=3 " + sets + " --out " + out);
  EXPECT_EQ(code, 0) << output;
  std::vector<nlohmann::json> steps;
  std::ifstream file(out + "/steps.jsonl");
  for (std::string line; std::getline(file, line);) steps.push_back(nlohmann::json::parse(line));
  return steps;
}

TEST(TrainingOnFiles, TheSyntheticSamplesAsFilesTrainAsTheSyntheticDataToTheBit) {
  RunConfig c = load_run_config(kTiny, {"data.global_batch_size=4"});
  const std::string train_dir = fresh_dir("synthetic_train"), eval_dir = fresh_dir("synthetic_eval");
  write_synthetic_steps(train_dir, c, DataStream::kTraining, 6, 5);
  write_synthetic_steps(eval_dir, c, DataStream::kHeldOut, 1, 4);
  const std::string layout = "--set layout.placement=non-colocated --set layout.encoder.dp=2 --set layout.llm.pp=2";
  const auto synthetic = run_steps("run_synthetic", layout);
  const auto files = run_steps("run_files", layout + " --set data.shuffle=false --set data.files=" + train_dir +
                                                " --set data.eval_files=" + eval_dir);
  ASSERT_EQ(synthetic.size(), 6u);
  ASSERT_EQ(files.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(files[i]["loss"].get<double>(), synthetic[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(files[i]["grad_norm"].get<double>(), synthetic[i]["grad_norm"].get<double>()) << "step " << i + 1;
    ASSERT_EQ(files[i].contains("eval_loss"), (i + 1) % 3 == 0);
    if ((i + 1) % 3 == 0) EXPECT_EQ(files[i]["eval_loss"].get<double>(), synthetic[i]["eval_loss"].get<double>());
  }
  // Shuffled, the same samples in another order: another curve.
  const auto shuffled = run_steps("run_shuffled", layout + " --set data.files=" + train_dir + " --set data.eval_files=" + eval_dir);
  ASSERT_EQ(shuffled.size(), 6u);
  EXPECT_NE(shuffled[0]["loss"].get<double>(), synthetic[0]["loss"].get<double>());
}

TEST(TrainingOnFiles, BadDataSettingsExitTwoBeforeAnyRankStarts) {
  const std::string base = kHetpar + " train " + kTiny + " --set run.steps=2 --out " + fresh_dir("bad_settings") + "/run";
  auto [code, out] = run_command(base + " --set data.files=/nonexistent/shards");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("data.files: /nonexistent/shards: not a directory of batch files"), std::string::npos) << out;
  EXPECT_EQ(out.find("launching"), std::string::npos) << out;
  std::tie(code, out) = run_command(base + " --set data.files=/tmp --set run.eval_every=1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("data.eval_files: must name held-out batch files"), std::string::npos) << out;
  std::tie(code, out) = run_command(base + " --set data.eval_files=/tmp");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("data.eval_files: is read only with run.eval_every > 0"), std::string::npos) << out;
}

// A step, or held-out set, whose every label is -100 has no loss to take the
// mean of: an error naming the data, not a NaN loss read as a divergence
// (exit 5) or printed as an evaluation (exit 0).
TEST(TrainingOnFiles, AStepWithoutATargetTokenIsNamedNotADivergence) {
  const RunConfig c = tiny_config(4);
  const std::string masked = fresh_dir("masked");
  std::vector<FileSample> samples;
  for (int n = 0; n < 4; ++n) {
    samples.push_back(numbered(n, n % 2, c));
    std::fill(samples.back().labels.begin(), samples.back().labels.end(), -100);
  }
  write_batch_file(masked + "/a.safetensors", samples, c);
  const std::string base = kHetpar + " train " + kTiny + " --set run.steps=1 --set data.global_batch_size=4 --out " +
                           fresh_dir("masked_runs");
  auto [code, out] = run_command(base + "/train --set data.files=" + masked);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("step 1 of 4 samples in 1 batch files of " + masked), std::string::npos) << out;
  EXPECT_NE(out.find("has no target token: every label of its 4 samples is -100"), std::string::npos) << out;
  EXPECT_EQ(out.find("diverged"), std::string::npos) << out;
  std::tie(code, out) = run_command(base + "/eval --set data.files=" + numbered_dataset("masked_train", c) +
                                    " --set run.eval_every=1 --set data.eval_files=" + masked);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("the evaluated batch of 4 samples in 1 batch files of " + masked + ", 1 steps an epoch"),
            std::string::npos) << out;
}

// hetpar plan says what it plans for: the files' mean, and their fullest
// sample where they count it, which the memory model then counts rather than
// data.images_max (4 here).
TEST(TrainingOnFiles, PlanLogsTheFilesImagesASample) {
  RunConfig c = tiny_config(4);
  const std::string plan = kHetpar + " plan " + kTiny + " --devices 4 --profile " +
                           source_tree_path("/profiles/h100_dgx.json") +
                           " --set data.global_batch_size=4 --set data.images_min=0 "
                           "--set data.images_max=4 --out ";
  auto [code, out] = run_command(plan + fresh_dir("plan_counted") + "/plan --set data.files=" +
                                 numbered_dataset("plan_counted_files", c, /*counted=*/true));
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("1 images a sample on average, the fullest 2 (image_counts), from the headers of "), std::string::npos) << out;
  EXPECT_NE(out.find("; the memory model counts 2 a sample\n"), std::string::npos) << out;
  std::tie(code, out) = run_command(plan + fresh_dir("plan_scanned") + "/plan --set data.files=" +
                                    numbered_dataset("plan_scanned_files", c));
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("1 images a sample on average, from the headers of "), std::string::npos) << out;
  EXPECT_NE(out.find("; the memory model counts 4 a sample (data.images_max)"), std::string::npos) << out;
}

}  // namespace
}  // namespace hetpar::test
