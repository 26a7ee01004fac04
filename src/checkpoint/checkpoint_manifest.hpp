// A checkpoint on disk, and what makes it complete:
//
//   OUT/checkpoints/step_00000040/
//     config.toml             the writer's resolved run (its layout, for resharding)
//     rank_00000.safetensors  that rank's shards: parameters, AdamW state, RNG
//     ...
//     manifest.json           written last: step, world size, each rank file's
//                             size and hash, config.toml's hash. No manifest =
//                             incomplete = ignored.
//
// Everything here is torch-free: finding, validating and pruning checkpoints,
// and deciding whether a run may resume from one.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace hetpar {

// A checkpoint that cannot be used: missing, incomplete, corrupted, or of
// another model. what() names the path (and the key) and the reason.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RankFile {
  int rank = 0;
  std::string name;      // file name inside the checkpoint directory
  uint64_t bytes = 0;
  std::string hash;      // FNV-1a 64 of the content, hex
};

struct CheckpointManifest {
  int64_t step = 0;
  int world_size = 0;
  std::vector<RankFile> files;  // one per rank, by rank
  // config.toml's hash: the layout the rank files are read by, and what a
  // resume is checked against. Empty in checkpoints from before it was kept.
  std::string config_hash;
};

std::string checkpoint_dir_name(int64_t step);             // "step_00000040"
std::string rank_file_name(int rank);                      // "rank_00000.safetensors"
std::string checkpoints_root(const std::string& run_dir);  // RUN/checkpoints

// FNV-1a 64 of a file's bytes, hex; throws CheckpointError when unreadable.
std::string file_hash(const std::string& path);

void write_manifest(const std::string& checkpoint_dir, const CheckpointManifest& manifest);
CheckpointManifest read_manifest(const std::string& checkpoint_dir);

// Every rank file is there with the size and hash the manifest records.
void verify_checkpoint_files(const std::string& checkpoint_dir, const CheckpointManifest& manifest);

// The complete checkpoint with the highest step under RUN/checkpoints.
std::optional<std::string> latest_complete_checkpoint(const std::string& run_dir);

// Removes all but the newest `keep` complete checkpoints, and any incomplete
// one older than the newest complete (left by a crash mid-write).
void prune_checkpoints(const std::string& run_dir, int64_t keep);

// The run a checkpoint may continue: the same model, data, optimizer and
// seed (layouts, placement, runtime and run length may differ). Throws
// CheckpointError naming the first key that differs and both values.
void check_resumable(const RunConfig& saved, const RunConfig& resuming, int64_t checkpoint_step);

}  // namespace hetpar
