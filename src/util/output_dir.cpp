#include "util/output_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "util/durable_file.hpp"
#include "util/marker_lock.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

bool matches(const std::string& file, const std::string& name) {
  if (!name.empty() && name.back() == '*') return file.rfind(name.substr(0, name.size() - 1), 0) == 0;
  return file == name;
}

}  // namespace

const OutputKind& run_outputs() {
  static const OutputKind kind{".hetpar-run",
                               {"config.toml", "steps.jsonl", "summary.json", "checkpoints", "profile_rank*"},
                               "hetpar train"};
  return kind;
}

const OutputKind& hf_export_outputs() {
  static const OutputKind kind{".hetpar-hf-export",
                               {"config.json", "model.safetensors", "model.safetensors.index.json", "model-0*"},
                               "hetpar train --save-hf"};
  return kind;
}

const OutputKind& plan_outputs() {
  static const OutputKind kind{".hetpar-plan", {"plan.json", "base.toml", "sweep.toml"}, "hetpar plan"};
  return kind;
}

bool is_marked(const std::string& dir, const OutputKind& kind) {
  return is_marker_file((fs::path(dir) / kind.marker).string());
}

std::vector<std::string> existing_outputs(const std::string& dir, const OutputKind& kind) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (std::any_of(kind.names.begin(), kind.names.end(), [&](const std::string& n) { return matches(file, n); })) {
      found.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string output_dir_problem(const std::string& dir, const OutputKind& kind) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) return "";
  if (!fs::is_directory(status)) return dir + " exists and is not a directory; choose another path";
  if (is_marked(dir, kind)) return "";
  const std::vector<std::string> found = existing_outputs(dir, kind);
  if (found.empty()) return "";
  return dir + " holds " + found.front() + ", which " + kind.writer + " would replace, and " + kind.writer +
         " did not write it (the directory has no " + kind.marker + " marker); choose another path, or move " +
         "it away yourself";
}

std::string json_format(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";  // unreadable, not JSON, or not an object
  const auto format = j.find("format");
  return format != j.end() && format->is_string() ? format->get<std::string>() : "";
}

void mark_output_dir(const std::string& dir, const OutputKind& kind) {
  ensure_writable_dir(dir);
  if (!is_marked(dir, kind)) {
    write_file_atomic((fs::path(dir) / kind.marker).string(), "made by " + kind.writer + "\n");
  }
}

}  // namespace hetpar
