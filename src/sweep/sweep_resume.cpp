#include "sweep/sweep_resume.hpp"

#include <filesystem>
#include <set>
#include <stdexcept>

#include "metrics/results_csv.hpp"
#include "util/durable_file.hpp"

namespace hetpar {
namespace {

// A field a resume reads: absent or not a string means the file was not written by a sweep.
std::string text_field(const nlohmann::json& record, const char* key, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_string()) throw std::runtime_error(where + ": " + key + " must be a string");
  return it->get<std::string>();
}

}  // namespace

ResumeState resume_results(const std::string& path, const std::vector<SweepRun>& runs, bool retry_failed) {
  ResumeState state;
  if (!std::filesystem::exists(path)) return state;
  std::map<std::string, const SweepRun*> by_id;
  for (const SweepRun& r : runs) by_id[r.id] = &r;
  bool torn = false;
  std::vector<int> lines;
  std::vector<nlohmann::json> records = read_results(path, &torn, &lines);
  state.dropped_torn = torn ? 1 : 0;
  static const std::set<std::string> kStatuses = {"ok", "failed", "diverged", "oom", "invalid"};
  std::vector<std::string> order;  // run ids in first-seen order
  for (size_t i = 0; i < records.size(); ++i) {
    nlohmann::json& record = records[i];
    const std::string where = path + ":" + std::to_string(lines[i]);
    const std::string id = text_field(record, "run_id", where);
    const std::string status = text_field(record, "status", where);
    if (!kStatuses.count(status)) {
      throw std::runtime_error(where + ": unknown status \"" + status +
                               "\" (known: ok, failed, diverged, oom, invalid)");
    }
    if (status == "invalid") continue;  // validity is evaluated afresh on every run
    // A run that is invalid now by its definition has no config hash: the
    // sweep file (or the base run) changed since it was measured. One this
    // machine cannot host keeps its hash, and its record: measured results
    // are never replaced by "invalid".
    const auto it = by_id.find(id);
    if (it == by_id.end() || text_field(record, "config_hash", where) != it->second->config_hash) {
      const std::string now = it == by_id.end()                  ? "it is not in the sweep now"
                              : it->second->config_hash.empty() ? "it is invalid now: " + it->second->invalid_reason
                                                                 : "its configuration differs";
      throw std::runtime_error(path + " holds results of another sweep definition (run " + id + ": " + now +
                               "); use --fresh to start over or another --out");
    }
    // A failed run is run again only where it can run: else its record stays.
    if (retry_failed && status != "ok" && it->second->config) {
      ++state.dropped_retry;
      state.done.erase(id);
      continue;
    }
    if (!state.done.count(id)) order.push_back(id);
    state.done[id] = std::move(record);  // a later record of the same run supersedes
  }
  std::string text;
  for (const std::string& id : order) {
    if (state.done.count(id)) text += state.done[id].dump() + "\n";
  }
  write_file_atomic(path, text);
  return state;
}

}  // namespace hetpar
