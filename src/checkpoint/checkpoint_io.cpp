#include "checkpoint/checkpoint_io.hpp"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_manifest.hpp"
#include "io/safetensors.hpp"
#include "model/param_init.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/rank_grid.hpp"
#include "train/sharded_optimizer.hpp"
#include "util/durable_file.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;
using Tensors = std::map<std::string, at::Tensor>;

constexpr const char* kStateKinds[] = {"exp_avg", "exp_avg_sq"};

at::Generator cpu_generator() { return at::detail::getDefaultCPUGenerator(); }

// The tensors of one rank file, read once.
class RankFiles {
 public:
  explicit RankFiles(std::string dir) : dir_(std::move(dir)) {}
  const Tensors& of(int rank) {
    auto it = files_.find(rank);
    if (it == files_.end()) {
      it = files_.emplace(rank, read_safetensors((fs::path(dir_) / rank_file_name(rank)).string())).first;
    }
    return it->second;
  }
  const at::Tensor& get(int rank, const std::string& name) {
    const Tensors& t = of(rank);
    const auto it = t.find(name);
    if (it == t.end()) {
      throw CheckpointError(fmt::format("{}/{}: no tensor {}", dir_, rank_file_name(rank), name));
    }
    return it->second;
  }

 private:
  std::string dir_;
  std::map<int, Tensors> files_;
};

void check_shape(const at::Tensor& from, at::IntArrayRef shape, const std::string& what) {
  if (from.sizes() != shape) {
    throw CheckpointError(fmt::format("{}: shape [{}] in the checkpoint, [{}] on this rank", what,
                                      fmt::join(from.sizes(), ","), fmt::join(shape, ",")));
  }
}

void copy_checked(at::Tensor& into, const at::Tensor& from, const std::string& what) {
  check_shape(from, into.sizes(), what);
  into.copy_(from);
}

// The writer's pipeline stage holding parameter `name`: a block's by its layer
// index; the embeddings on the first stage; the LLM's final norm and head, and
// the projector, on the last.
int writer_stage(const RunConfig& writer, const std::string& name, bool encoder_side) {
  const int stages = encoder_side ? writer.placement.encoder.pp : writer.placement.llm.pp;
  if (stages == 1) return 0;
  const std::string layers = encoder_side ? "encoder.layers." : "llm.layers.";
  const int64_t layer_count = encoder_side ? writer.encoder.layers : writer.llm.layers;
  if (name.rfind(layers, 0) == 0) return stage_of_layer(layer_count, stages, std::stoll(name.substr(layers.size())));
  const bool on_first = encoder_side ? name.rfind("projector.", 0) != 0 : name.rfind("llm.embed_tokens", 0) == 0;
  return on_first ? 0 : stages - 1;
}

// The writer's job ranks holding DP replica 0's TP shards of a parameter, by TP rank.
std::vector<int> writer_shard_ranks(const RunConfig& writer, const std::string& name, bool encoder_side) {
  const ModulePlacement& p = writer.placement;
  const RankGrid grid(encoder_side ? p.encoder : p.llm, encoder_side ? p.encoder_ranks.offset : p.llm_ranks.offset);
  const int stage = writer_stage(writer, name, encoder_side);
  std::vector<int> ranks;
  for (int t = 0; t < grid.layout().tp; ++t) ranks.push_back(grid.rank({t, 0, 0, stage}));
  return ranks;
}

// Tensor `name` of a parameter as the reader's shard: gathered from the
// writer's shards along `dim` (taken from its TP rank 0 when replicated),
// then split for the reader's TP coordinate.
at::Tensor reader_shard(RankFiles& files, const std::vector<int>& writer_ranks, const std::string& name, int dim,
                        int reader_tp_rank, int reader_tp_size) {
  if (dim < 0) return files.get(writer_ranks.front(), name);
  std::vector<at::Tensor> shards;
  for (int r : writer_ranks) shards.push_back(files.get(r, name));
  return shard(at::cat(shards, dim), dim, reader_tp_rank, reader_tp_size);
}

bool same_layout(const ModulePlacement& a, const ModulePlacement& b) {
  return a.placement == b.placement && a.encoder == b.encoder && a.llm == b.llm && a.world_size == b.world_size;
}

}  // namespace

void save_checkpoint(const CheckpointParts& parts, const std::string& run_dir, int64_t step) {
  const std::string dir = (fs::path(checkpoints_root(run_dir)) / checkpoint_dir_name(step)).string();
  ensure_writable_dir(dir);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const FullOptimizerState state(parts.optimizer, parts.reducers);
  for (const auto& p : parts.model.named_parameters()) {
    tensors.emplace_back("param/" + p.name, p.tensor);
    const FusedAdamW::State s = state.of(p.tensor);
    if (!s.step.defined()) continue;  // frozen: no optimizer state
    tensors.emplace_back("exp_avg/" + p.name, s.exp_avg);
    tensors.emplace_back("exp_avg_sq/" + p.name, s.exp_avg_sq);
    tensors.emplace_back("step/" + p.name, s.step);
  }
  tensors.emplace_back("rng/cpu", cpu_generator().get_state());
  const std::string mine = (fs::path(dir) / rank_file_name(parts.world.rank())).string();
  write_safetensors(mine, tensors);

  // Every rank's size and hash to rank 0; the manifest comes only after all are written.
  at::Tensor entry = at::empty({1, 2}, at::kLong);
  entry[0][0] = static_cast<int64_t>(fs::file_size(mine));
  entry[0][1] = static_cast<int64_t>(std::stoull(file_hash(mine), nullptr, 16));
  // On the world's device (NCCL moves CUDA tensors only), read back on the host.
  const at::Tensor all = parts.world.all_gather(entry.to(parts.model.device())).cpu();
  if (parts.world.rank() != 0) return;
  const std::string config = (fs::path(dir) / "config.toml").string();
  write_file_atomic(config, to_toml(parts.config));
  CheckpointManifest manifest;
  manifest.step = step;
  manifest.world_size = parts.world.size();
  manifest.config_hash = file_hash(config);
  for (int r = 0; r < parts.world.size(); ++r) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(all[r][1].item<int64_t>()));
    manifest.files.push_back({r, rank_file_name(r), static_cast<uint64_t>(all[r][0].item<int64_t>()), hash});
  }
  write_manifest(dir, manifest);
  prune_checkpoints(run_dir, parts.config.run.checkpoint_keep);
}

void load_checkpoint(const CheckpointParts& parts, const std::string& checkpoint_dir) {
  const RunConfig writer = load_run_config((fs::path(checkpoint_dir) / "config.toml").string(), {});
  const ModulePlacement& now = parts.config.placement;
  const bool resharding = !same_layout(writer.placement, now);
  RankFiles files(checkpoint_dir);
  const int me = parts.world.rank();
  at::NoGradGuard no_grad;
  for (const auto& p : parts.model.named_parameters()) {
    const int tp_rank = p.on_encoder_side ? parts.encoder_tp_rank : parts.llm_tp_rank;
    const int tp_size = p.on_encoder_side ? now.encoder.tp : now.llm.tp;
    const std::vector<int> writers = writer_shard_ranks(writer, p.name, p.on_encoder_side);
    auto value = [&](const std::string& name) {
      return resharding ? reader_shard(files, writers, name, p.shard_dim, tp_rank, tp_size) : files.get(me, name);
    };
    at::Tensor param = p.tensor;
    copy_checked(param, value("param/" + p.name), "param/" + p.name);
    // This rank's part of the state: all of it, or its segment when the state is sharded.
    const FusedAdamW::State s = parts.optimizer.state_of(p.tensor);
    if (!s.step.defined()) continue;
    for (const char* kind : kStateKinds) {
      const std::string name = std::string(kind) + "/" + p.name;
      const at::Tensor whole = value(name);
      check_shape(whole, p.tensor.sizes(), name);
      load_state_part(std::string(kind) == "exp_avg" ? s.exp_avg : s.exp_avg_sq, whole, s.offset);
    }
    at::Tensor step = s.step;
    copy_checked(step, files.get(resharding ? writers.front() : me, "step/" + p.name), "step/" + p.name);
  }
  cpu_generator().set_state(files.get(resharding ? 0 : me, "rng/cpu"));
}

}  // namespace hetpar
