#include "checkpoint/checkpoint_manifest.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "config/run_schema.hpp"
#include "util/durable_file.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifest = "manifest.json";

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind("step_", 0) != 0) return std::nullopt;
  try {
    size_t used = 0;
    const int64_t step = std::stoll(name.substr(5), &used);
    return used == name.size() - 5 ? std::optional<int64_t>(step) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Checkpoint directories under RUN/checkpoints by step, and whether each is complete.
std::map<int64_t, std::pair<fs::path, bool>> checkpoints_of(const std::string& run_dir) {
  std::map<int64_t, std::pair<fs::path, bool>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints_root(run_dir), ec)) {
    if (const auto step = step_of(entry.path()); step && entry.is_directory()) {
      found[*step] = {entry.path(), fs::exists(entry.path() / kManifest)};
    }
  }
  return found;
}

// The keys a resumed run must share with the checkpoint: what the model is,
// what it is fed and how it is optimised. Layout, runtime and length may change.
// The micro-batch size may change with the layout: the loss does not depend on
// it; so may the optimizer state's sharding (a checkpoint holds it whole).
bool must_match(const std::string& key) {
  if (key == "data.micro_batch_size" || key == "optim.shard_state") return false;
  for (const char* section : {"encoder.", "llm.", "data.", "optim."}) {
    if (key.rfind(section, 0) == 0) return true;
  }
  return key == "run.seed";
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

std::string checkpoints_root(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

std::string file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot read " + path);
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

void write_manifest(const std::string& checkpoint_dir, const CheckpointManifest& m) {
  nlohmann::json j = {{"format", "hetpar checkpoint 1"}, {"step", m.step}, {"world_size", m.world_size}};
  for (const RankFile& f : m.files) {
    j["files"].push_back({{"rank", f.rank}, {"name", f.name}, {"bytes", f.bytes}, {"hash", f.hash}});
  }
  if (!m.config_hash.empty()) j["config_hash"] = m.config_hash;
  write_file_atomic((fs::path(checkpoint_dir) / kManifest).string(), j.dump(2) + "\n");
}

CheckpointManifest read_manifest(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / kManifest).string();
  std::ifstream in(path);
  if (!in) throw CheckpointError(path + ": missing: the checkpoint is incomplete (its writer did not finish)");
  CheckpointManifest m;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("format") != "hetpar checkpoint 1") throw std::runtime_error("unknown format " + j.at("format").dump());
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    for (const auto& f : j.at("files")) {
      m.files.push_back({f.at("rank").get<int>(), f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                         f.at("hash").get<std::string>()});
    }
    if (j.contains("config_hash")) m.config_hash = j.at("config_hash").get<std::string>();
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": not a checkpoint manifest: " + e.what());
  }
  if (static_cast<int>(m.files.size()) != m.world_size) {
    throw CheckpointError(path + ": lists " + std::to_string(m.files.size()) + " rank files for world size " +
                          std::to_string(m.world_size));
  }
  for (size_t r = 0; r < m.files.size(); ++r) {
    if (m.files[r].rank != static_cast<int>(r) || m.files[r].name != rank_file_name(static_cast<int>(r))) {
      throw CheckpointError(path + ": rank file " + std::to_string(r) + " is listed as " + m.files[r].name);
    }
  }
  return m;
}

void verify_checkpoint_files(const std::string& checkpoint_dir, const CheckpointManifest& m) {
  for (const RankFile& f : m.files) {
    const std::string path = (fs::path(checkpoint_dir) / f.name).string();
    std::error_code ec;
    const uint64_t bytes = fs::file_size(path, ec);
    if (ec) throw CheckpointError(path + ": missing (" + ec.message() + ")");
    if (bytes != f.bytes) {
      throw CheckpointError(path + ": " + std::to_string(bytes) + " bytes, the manifest records " +
                            std::to_string(f.bytes) + " (truncated or replaced)");
    }
    if (file_hash(path) != f.hash) throw CheckpointError(path + ": content differs from the manifest's hash (corrupted)");
  }
  // An edited config.toml would read the rank files under another layout, or let another model resume.
  const std::string config = (fs::path(checkpoint_dir) / "config.toml").string();
  if (!m.config_hash.empty() && file_hash(config) != m.config_hash) {
    throw CheckpointError(config + ": content differs from the manifest's hash (edited or corrupted since the "
                          "checkpoint was written)");
  }
}

std::optional<std::string> latest_complete_checkpoint(const std::string& run_dir) {
  const auto found = checkpoints_of(run_dir);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    if (it->second.second) return it->second.first.string();
  }
  return std::nullopt;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  const auto found = checkpoints_of(run_dir);
  int64_t complete_seen = 0;
  bool newer_complete = false;
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const auto& [path, complete] = it->second;
    const bool drop = complete ? ++complete_seen > keep : newer_complete;
    newer_complete = newer_complete || complete;
    if (drop) fs::remove_all(path);
  }
}

void check_resumable(const RunConfig& saved, const RunConfig& resuming, int64_t checkpoint_step) {
  for (const SchemaKey& key : run_schema()) {
    if (!must_match(key.key)) continue;
    const SchemaValue a = key.get(saved), b = key.get(resuming);
    if (a != b) {
      throw CheckpointError("the checkpoint's run and this one differ in " + key.key + ": " + toml_literal(a) +
                            " in the checkpoint, " + toml_literal(b) + " now; a checkpoint continues only the same "
                            "model, data, optimizer and seed (layouts, placement, micro-batch size, optim.shard_state, runtime and "
                            "run.steps may change)");
    }
  }
  if (resuming.run.steps <= checkpoint_step) {
    throw CheckpointError("the checkpoint is at step " + std::to_string(checkpoint_step) + " and run.steps = " +
                          std::to_string(resuming.run.steps) + ": nothing left to train");
  }
}

}  // namespace hetpar
