#include "interop/hf_export.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <system_error>

#include "interop/hf_llava.hpp"
#include "io/safetensors.hpp"
#include "tp/tp_comm_ops.hpp"
#include "util/durable_file.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

// The tower's final LayerNorm that transformers expects but LLaVA never
// applies to the features it uses: exported as the identity, with the projector.
constexpr const char* kUnusedPostLayerNorm = "model.vision_tower.post_layernorm.";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

at::Tensor gather_full(const MultimodalModel::NamedParameter& p, Group& tp) {
  const at::Tensor local = p.tensor.detach();
  if (p.shard_dim < 0 || tp.size() == 1) return local;
  return p.shard_dim == 0 ? tp.all_gather(local) : all_gather_last_dim(local, tp);
}

bool is_stage_leader(const GridCoord& c) { return c.tp == 0 && c.cp == 0 && c.dp == 0; }

// The weight files of an earlier export (one file, or an index and its
// shards), whatever its layout was: only names this writer gives.
void remove_earlier_weights(const std::string& dir) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::vector<fs::path> old;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == kSingleFile || name == kIndexFile || std::regex_match(name, shard)) old.push_back(entry.path());
  }
  for (const fs::path& path : old) {
    std::error_code error;
    fs::remove(path, error);
    if (error) throw FileError("cannot remove the earlier export's " + path.string() + ": " + error.message());
  }
}

// model.safetensors.index.json from the shards' headers (rank 0 reads them: it
// knows no other stage's tensor names).
void write_index(const std::string& dir, const HfExportFiles& files) {
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (int f = 0; f < static_cast<int>(files.writers.size()); ++f) {
    const std::string path = dir + "/" + files.name(f);
    if (!fs::is_regular_file(path)) {
      throw FileError(fmt::format("{} was written by rank {} but rank 0 does not see it: --save-hf needs a "
                                  "directory every rank shares", path, files.writers[f]));
    }
    for (const auto& [key, entry] : read_safetensors_header(path).entries) {
      weight_map[key] = files.name(f);
      total += entry.end - entry.begin;
    }
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(dir + "/" + kIndexFile, index.dump(2) + "\n");
}

}  // namespace

std::string HfExportFiles::name(int file) const {
  if (single()) return kSingleFile;
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", file + 1, writers.size());
}

HfExportFiles hf_export_files(const RankGrid& encoder, const RankGrid& llm) {
  HfExportFiles files;
  const int encoder_stages = encoder.layout().pp, llm_stages = llm.layout().pp;
  if (encoder_stages == 1 && llm_stages == 1 && encoder.rank({}) == llm.rank({})) {
    files.writers = {encoder.rank({})};
    return files;
  }
  for (int s = 0; s < encoder_stages; ++s) files.writers.push_back(encoder.rank({.pp = s}));
  files.llm_first = encoder_stages;
  for (int s = 0; s < llm_stages; ++s) files.writers.push_back(llm.rank({.pp = s}));
  return files;
}

void save_hf(const RunConfig& config, const MultimodalModel& model, JobGroups& groups, Group& world,
             const std::string& dir) {
  const HfExportFiles files = hf_export_files(groups.encoder().grid(), groups.llm().grid());
  std::map<int, std::vector<std::pair<std::string, at::Tensor>>> mine;  // file -> (name, full tensor)
  for (const auto& p : model.named_parameters()) {
    const ModuleGroups& module = p.on_encoder_side ? groups.encoder() : groups.llm();
    const at::Tensor full = gather_full(p, module.get(GroupKind::kTp));  // every TP rank takes part
    if (!is_stage_leader(module.coord())) continue;
    const int file = (p.on_encoder_side ? files.encoder_first : files.llm_first) + module.coord().pp;
    mine[file].emplace_back(hf_name(p.name), to_hf_shape(p.name, full, config.encoder).to(at::kFloat));
  }
  if (model.projector && is_stage_leader(groups.encoder().coord())) {
    auto& file = mine[files.encoder_first + groups.encoder().coord().pp];
    file.emplace_back(std::string(kUnusedPostLayerNorm) + "weight", at::ones({config.encoder.hidden}));
    file.emplace_back(std::string(kUnusedPostLayerNorm) + "bias", at::zeros({config.encoder.hidden}));
  }
  if (world.rank() == 0) {
    ensure_writable_dir(dir);
    remove_earlier_weights(dir);
  }
  world.barrier();  // no shard of this export is written before the old ones are gone
  for (const auto& [file, tensors] : mine) write_safetensors(dir + "/" + files.name(file), tensors);
  world.barrier();  // every shard is complete before the index names it
  if (world.rank() != 0) return;
  if (!files.single()) write_index(dir, files);
  write_file_atomic(dir + "/config.json", llava_config_json(config) + "\n");
}

}  // namespace hetpar
