#include "sweep/sweep_resume.hpp"

#include <filesystem>
#include <stdexcept>

#include "metrics/results_csv.hpp"
#include "util/durable_file.hpp"

namespace hetpar {

ResumeState resume_results(const std::string& path, const std::vector<SweepRun>& runs, bool retry_failed) {
  ResumeState state;
  if (!std::filesystem::exists(path)) return state;
  std::map<std::string, const SweepRun*> by_id;
  for (const SweepRun& r : runs) by_id[r.id] = &r;
  bool torn = false;
  std::vector<nlohmann::json> records = read_results(path, &torn);
  state.dropped_torn = torn ? 1 : 0;
  std::vector<std::string> order;  // run ids in first-seen order
  for (nlohmann::json& record : records) {
    const std::string id = record.value("run_id", "");
    const std::string status = record.value("status", "");
    if (status == "invalid") continue;
    const auto it = by_id.find(id);
    if (it != by_id.end() && !it->second->config) continue;  // invalid now: recorded afresh
    if (it == by_id.end() || record.value("config_hash", "") != it->second->config_hash) {
      throw std::runtime_error(path + " holds results of another sweep definition (run " + id +
                               " differs); use --fresh to start over or another --out");
    }
    if (retry_failed && status != "ok") {
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
