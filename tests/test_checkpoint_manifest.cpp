// Checkpoint bookkeeping without torch: which checkpoint is the latest
// complete one, pruning, manifest damage, and what a resumed run may change.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_manifest.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "hetpar_ckpt_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~Scratch() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// A checkpoint of `step` with one rank file; complete when it has its manifest.
std::string make_checkpoint(const std::string& run_dir, int64_t step, bool complete) {
  const std::string dir = checkpoints_root(run_dir) + "/" + checkpoint_dir_name(step);
  fs::create_directories(dir);
  std::ofstream(dir + "/" + rank_file_name(0)) << "tensor bytes of step " << step;
  if (complete) {
    const std::string file = dir + "/" + rank_file_name(0);
    write_manifest(dir, {step, 1, {{0, rank_file_name(0), fs::file_size(file), file_hash(file)}}});
  }
  return dir;
}

TEST(CheckpointManifest, LatestCompleteIgnoresIncompleteAndStrayEntries) {
  Scratch run;
  EXPECT_EQ(latest_complete_checkpoint(run.str()), std::nullopt);
  make_checkpoint(run.str(), 4, true);
  const std::string eight = make_checkpoint(run.str(), 8, true);
  make_checkpoint(run.str(), 12, false);  // a writer killed mid-checkpoint
  fs::create_directories(checkpoints_root(run.str()) + "/step_x12");
  std::ofstream(checkpoints_root(run.str()) + "/step_00000099") << "a file, not a directory";
  EXPECT_EQ(latest_complete_checkpoint(run.str()), eight);
  const CheckpointManifest m = read_manifest(eight);
  EXPECT_EQ(m.step, 8);
  EXPECT_NO_THROW(verify_checkpoint_files(eight, m));
}

TEST(CheckpointManifest, PruneKeepsTheNewestCompleteOnes) {
  Scratch run;
  for (int64_t step : {2, 4, 6}) make_checkpoint(run.str(), step, true);
  make_checkpoint(run.str(), 3, false);   // older than a complete one: left by a crash
  make_checkpoint(run.str(), 10, false);  // newer: may be being written now
  prune_checkpoints(run.str(), 2);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(checkpoints_root(run.str()))) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_00000004", "step_00000006", "step_00000010"}));
}

TEST(CheckpointManifest, DamageIsNamed) {
  Scratch run;
  const std::string dir = make_checkpoint(run.str(), 5, true);
  const std::string file = dir + "/" + rank_file_name(0);
  const CheckpointManifest m = read_manifest(dir);
  std::ofstream(file, std::ios::app) << "!";
  try {
    verify_checkpoint_files(dir, m);
    FAIL() << "a longer file passed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated or replaced"), std::string::npos) << e.what();
  }
  std::ofstream(file, std::ios::trunc) << "tensor bytes of step 6";  // same size, other bytes
  try {
    verify_checkpoint_files(dir, m);
    FAIL() << "other content passed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupted"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/manifest.json") << "{\"format\": \"hetpar checkpoint 1\", \"step\": 5";
  EXPECT_THROW(read_manifest(dir), CheckpointError);
  fs::remove(dir + "/manifest.json");
  try {
    read_manifest(dir);
    FAIL() << "no manifest passed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete"), std::string::npos) << e.what();
  }
}

TEST(CheckpointManifest, AResumedRunMayChangeTheLayoutButNotTheModel) {
  const std::string run = source_tree_path("/workloads/runs/quickstart.toml");
  const RunConfig saved = load_run_config(run, {});
  EXPECT_NO_THROW(check_resumable(saved, load_run_config(run, {"layout.placement=uniform", "layout.encoder.dp=1",
                                                                "layout.llm.tp=1", "data.micro_batch_size=1",
                                                                "runtime.timeout_s=9", "run.steps=99"}), 10));
  try {
    check_resumable(saved, load_run_config(run, {"optim.lr=0.5"}), 10);
    FAIL() << "another learning rate resumed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("optim.lr"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_resumable(saved, load_run_config(run, {"encoder.frozen=true"}), 10), CheckpointError);
  EXPECT_THROW(check_resumable(saved, load_run_config(run, {"run.steps=10"}), 10), CheckpointError);
}

}  // namespace
}  // namespace hetpar
