// Writing a hetpar model as a transformers LLaVA directory, under any layout.
// Where one rank holds both whole modules the weights go to one
// model.safetensors; under pipeline parallelism, or with the modules on
// different ranks, each stage of each module is one shard file
// (model-0000k-of-0000n.safetensors, the encoder's stages first), written by
// the stage's rank at TP, CP and DP coordinate 0, and rank 0 names them all
// in model.safetensors.index.json, the sharded layout transformers reads.
// No rank gathers another stage's weights.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "dist/group.hpp"
#include "dist/module_groups.hpp"
#include "parallel/rank_grid.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

struct HfExportFiles {
  std::vector<int> writers;              // the job rank that writes each file
  int encoder_first = 0, llm_first = 0;  // the file of each module's stage 0; stage s writes to first + s
  bool single() const { return writers.size() == 1; }
  // "model.safetensors", or the shard name of file `file` (0-based).
  std::string name(int file) const;
};

// The files of an export of modules laid out on these grids.
HfExportFiles hf_export_files(const RankGrid& encoder, const RankGrid& llm);

// Gathers each parameter over its TP group (every rank takes part: a
// collective over `world`), writes this rank's files into `dir` (which the
// caller has marked as a hetpar export), and on rank 0 config.json and the
// index. An earlier export's weight files in `dir` are removed first, so a
// reader never mixes two exports. Throws FileError where a file cannot be
// written, or where rank 0 cannot see a shard another rank wrote (`dir` must
// be one directory for every rank).
void save_hf(const RunConfig& config, const MultimodalModel& model, JobGroups& groups, Group& world,
             const std::string& dir);

}  // namespace hetpar
