// A rank's part of a checkpoint: its parameter shards, their AdamW state and
// the CPU generator's state, under names that do not depend on the layout
// ("param/llm.layers.0.mlp.up_proj.weight", "exp_avg/...", "exp_avg_sq/...",
// "step/...", "rng/cpu"), so a checkpoint written under one layout can be
// resharded into another: each parameter is reassembled from the writer's
// TP shards of DP replica 0 and split again for the reader.
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.hpp"
#include "dist/group.hpp"
#include "train/fused_adamw.hpp"
#include "train/grad_reducer.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

struct CheckpointParts {
  const RunConfig& config;
  MultimodalModel& model;
  FusedAdamW& optimizer;
  Group& world;
  int encoder_tp_rank = 0, llm_tp_rank = 0;  // this rank's coordinates (where it holds the module)
  // The modules' gradient reducers (null where a module is not on this rank):
  // where one shards the optimizer state, a save gathers it whole first.
  std::vector<const GradReducer*> reducers = {};
};

// On every rank at the end of step `step` (a collective): each rank writes
// its file (sharded optimizer state gathered whole first, so the files are
// the same either way), then rank 0 writes the writer's config and, once every rank's
// file is complete, the manifest; then it prunes old checkpoints.
void save_checkpoint(const CheckpointParts& parts, const std::string& run_dir, int64_t step);

// Fills this rank's parameters and optimizer state from the complete
// checkpoint in `checkpoint_dir`, resharding when its writer's layout differs.
void load_checkpoint(const CheckpointParts& parts, const std::string& checkpoint_dir);

}  // namespace hetpar
