#include "metrics/point_repeats.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "metrics/run_summary.hpp"

namespace hetpar {
namespace {

using nlohmann::json;

std::string text_of(const json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : "";
}

bool has_label(const json& record) {
  return record.is_object() && record.contains("label") && record["label"].is_string();
}

std::string status_of(const json& record) {
  return record.contains("status") && record["status"].is_string() ? record["status"].get<std::string>()
                                                                   : "without status";
}

// The values of a numeric field in those records that have it.
std::vector<double> numbers(const std::vector<const json*>& records, const std::string& key) {
  std::vector<double> out;
  for (const json* r : records) {
    const auto it = r->find(key);
    if (it != r->end() && it->is_number()) out.push_back(it->get<double>());
  }
  return out;
}

// The figures a run's summary gives as medians over its timed steps.
constexpr const char* kMedianFields[] = {"tflops_per_gpu",    "mfu", "tokens_per_second", "image_tokens_per_second",
                                         "samples_per_second", "flops_per_step", "step_seconds_median",
                                         "step_seconds_p10",   "step_seconds_p90"};

void pool_medians(json& out, const std::vector<const json*>& runs) {
  for (const char* key : kMedianFields) {
    const std::vector<double> v = numbers(runs, key);
    if (!v.empty()) out[key] = quantile(v, 0.5);
  }
  std::set<std::string> phases;
  for (const json* r : runs) {
    if (r->contains("phases") && (*r)["phases"].is_object()) {
      for (const auto& [name, value] : (*r)["phases"].items()) phases.insert(name);
    }
  }
  for (const std::string& name : phases) {
    std::vector<double> v;
    for (const json* r : runs) {
      if (r->contains("phases") && (*r)["phases"].contains(name) && (*r)["phases"][name].is_number()) {
        v.push_back((*r)["phases"][name].get<double>());
      }
    }
    out["phases"][name] = quantile(v, 0.5);
  }
}

// Worst case over the runs: the largest memory, the largest loss difference.
void pool_extremes(json& out, const std::vector<const json*>& runs) {
  for (const char* field : {"peak_memory_mib", "peak_tensor_mib"}) {
    if (const std::vector<double> v = numbers(runs, field); !v.empty()) out[field] = *std::max_element(v.begin(), v.end());
  }
  if (const std::vector<double> v = numbers(runs, "eval_loss_max_rel_diff"); !v.empty()) {
    out["eval_loss_max_rel_diff"] = *std::max_element(v.begin(), v.end());
  }
  if (const std::vector<double> v = numbers(runs, "loss_max_rel_diff"); !v.empty()) {
    out["loss_max_rel_diff"] = *std::max_element(v.begin(), v.end());
    bool held = true;
    for (const json* r : runs) held = held && r->value("loss_parity_ok", false);
    out["loss_parity_ok"] = held;
  }
  if (const std::vector<double> v = numbers(runs, "timed_steps"); !v.empty()) {
    double total = 0;
    for (const double n : v) total += n;
    out["timed_steps"] = static_cast<int64_t>(total);
  }
}

nlohmann::json ratio(const json& point, const json& baseline, const char* key) {
  if (!point.contains(key) || !baseline.contains(key) || !point[key].is_number() || !baseline[key].is_number() ||
      !(baseline[key].get<double>() > 0)) {
    return nullptr;
  }
  return point[key].get<double>() / baseline[key].get<double>();
}

}  // namespace

bool PointRuns::ok() const { return status() == "ok"; }

std::vector<const json*> PointRuns::ok_runs() const {
  std::vector<const json*> ok;
  for (const json* r : runs) {
    if (status_of(*r) == "ok") ok.push_back(r);
  }
  return ok;
}

std::string PointRuns::status() const {
  for (const json* r : runs) {
    if (status_of(*r) != "ok") return status_of(*r);
  }
  return runs.empty() ? "without status" : "ok";
}

const PointRuns* PointIndex::find(const std::string& label) const {
  const auto it = at.find(label);
  return it == at.end() ? nullptr : &points[it->second];
}

PointIndex index_points(const std::vector<json>& records) {
  PointIndex index;
  std::map<std::pair<std::string, std::string>, size_t> slot_of_run;  // (label, run id) -> index in runs
  for (const json& r : records) {
    if (!has_label(r)) {
      ++index.unlabeled;
      continue;
    }
    const std::string label = r["label"].get<std::string>();
    const auto [at, new_label] = index.at.try_emplace(label, index.points.size());
    if (new_label) index.points.push_back({label, {}});
    PointRuns& point = index.points[at->second];
    const auto [slot, new_run] = slot_of_run.try_emplace({label, text_of(r, "run_id")}, point.runs.size());
    if (new_run) {
      point.runs.push_back(&r);
    } else {
      point.runs[slot->second] = &r;
      ++index.superseded;
    }
  }
  return index;
}

json pooled_record(const PointRuns& point) {
  const std::vector<const json*> ok = point.ok_runs();
  if (ok.empty()) throw std::invalid_argument("point '" + point.label + "' has no ok run to pool");
  json out = *ok.front();
  pool_medians(out, ok);
  pool_extremes(out, ok);
  out["repeats"] = ok.size();
  out["repeat_run_ids"] = json::array();
  for (const json* r : ok) out["repeat_run_ids"].push_back(text_of(*r, "run_id"));
  return out;
}

std::vector<json> pool_repeats(const std::vector<json>& records) {
  const PointIndex index = index_points(records);
  std::vector<json> out;
  std::map<std::string, size_t> row_of_run;  // run id -> the row holding it
  std::set<size_t> pooled_rows;
  std::set<std::string> emitted;
  for (const json& r : records) {
    if (!has_label(r)) {
      out.push_back(r);
      continue;
    }
    const PointRuns& point = *index.find(r["label"].get<std::string>());
    if (!emitted.insert(point.label).second) continue;
    if (point.runs.size() == 1) {
      row_of_run[text_of(*point.runs[0], "run_id")] = out.size();
      out.push_back(*point.runs[0]);
      continue;
    }
    std::vector<const json*> others;
    for (const json* run : point.runs) {
      if (status_of(*run) != "ok") others.push_back(run);
    }
    if (others.size() < point.runs.size()) {
      pooled_rows.insert(out.size());
      for (const json* run : point.runs) {
        if (status_of(*run) == "ok") row_of_run[text_of(*run, "run_id")] = out.size();
      }
      out.push_back(pooled_record(point));
    }
    for (const json* run : others) out.push_back(*run);
  }
  // Speed-ups of pooled figures: the runner's were of one run against one run.
  for (size_t i = 0; i < out.size(); ++i) {
    json& row = out[i];
    if (text_of(row, "role") != "point") continue;
    const auto base = row_of_run.find(text_of(row, "baseline_id"));
    if (base == row_of_run.end() || (!pooled_rows.count(i) && !pooled_rows.count(base->second))) continue;
    const json& baseline = out[base->second];
    row["baseline_id"] = baseline.value("run_id", "");  // the row that holds it, as for a point run once
    row["speedup_tflops"] = ratio(row, baseline, "tflops_per_gpu");
    row["speedup_tokens"] = ratio(row, baseline, "tokens_per_second");
  }
  return out;
}

}  // namespace hetpar
