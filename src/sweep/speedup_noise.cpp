#include "sweep/speedup_noise.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "metrics/point_repeats.hpp"
#include "metrics/significance.hpp"
#include "metrics/step_samples.hpp"
#include "sweep/sweep_groups.hpp"

namespace hetpar {
namespace {

using Json = nlohmann::json;

// The finished runs of a label.
std::vector<const Json*> ok_runs(const PointIndex& index, const std::string& label) {
  const PointRuns* point = index.find(label);
  return point ? point->ok_runs() : std::vector<const Json*>{};
}

SpeedupNoise compare(const PointIndex& index, const std::string& point, const std::string& reference,
                     const std::string& comparison, const std::string& results_dir) {
  SpeedupNoise row;
  row.comparison = comparison;
  const std::vector<const Json*> a = ok_runs(index, point), b = ok_runs(index, reference);
  row.point_runs = static_cast<int>(a.size());
  row.reference_runs = static_cast<int>(b.size());
  if (std::min(a.size(), b.size()) < 2) {
    row.problem = "fewer than two runs a side";
    return row;
  }
  const StepSamples sa = read_step_samples(a, results_dir, "tokens_per_second");
  const StepSamples sb = read_step_samples(b, results_dir, "tokens_per_second");
  row.problem = !sa.problem.empty() ? sa.problem : sb.problem;
  if (!row.problem.empty()) return row;
  const RatioInterval ci = bootstrap_median_ratio(sb.runs, sa.runs);  // median(point) / median(reference)
  row.ratio = ci.ratio;
  row.low = ci.low;
  row.high = ci.high;
  return row;
}

std::string label_of_run(const std::vector<Json>& records, const std::string& run_id) {
  for (const Json& r : records) {
    if (r.value("run_id", "") == run_id) return r.value("label", "");
  }
  return "";
}

}  // namespace

std::string SpeedupNoise::verdict() const {
  if (!problem.empty()) return "-";
  return low > 1 ? "faster" : high < 1 ? "slower" : "within noise";
}

std::vector<SpeedupNoise> sweep_speedup_noise(const std::vector<Json>& records, const std::string& results_dir) {
  const PointIndex index = index_points(records);
  std::vector<SpeedupNoise> rows;
  for (const PointRuns& point : index.points) {
    const Json& first = *point.runs.front();
    if (first.value("role", "") != "point") continue;
    const std::string baseline = label_of_run(records, first.value("baseline_id", ""));
    if (baseline.empty()) continue;
    rows.push_back(compare(index, point.label, baseline,
                           point.label + " over its baseline", results_dir));
  }
  const std::vector<Json> pooled = pool_repeats(records);
  std::vector<const Json*> ok_rows;
  for (const Json& r : pooled) {
    if (r.value("status", "") == "ok") ok_rows.push_back(&r);
  }
  for (const auto& [setting, points] : points_by_setting(ok_rows)) {
    const auto coloc = points.best.find("colocated"), noncoloc = points.best.find("non-colocated");
    if (coloc == points.best.end() || noncoloc == points.best.end()) continue;
    rows.push_back(compare(index, noncoloc->second->value("label", ""), coloc->second->value("label", ""),
                           fmt::format("{}: non-colocated over colocated", setting), results_dir));
  }
  return rows;
}

std::string speedup_noise_section(const std::vector<SpeedupNoise>& rows) {
  if (rows.empty()) return "";
  std::string table, untested;
  for (const SpeedupNoise& r : rows) {
    if (!r.problem.empty()) {
      untested += fmt::format("- {}: {} ({} and {} runs)\n", r.comparison, r.problem, r.point_runs, r.reference_runs);
      continue;
    }
    table += fmt::format("| {} | {:.3f}x | [{:.3f}, {:.3f}] | {} / {} | {} |\n", r.comparison, r.ratio, r.low,
                         r.high, r.point_runs, r.reference_runs, r.verdict());
  }
  std::string text =
      "\n## Speed-ups and the machine's noise\n\n"
      "Tokens/s of each point over its reference: the ratio of the medians of every timed step of their runs "
      "(the table above takes the median of the runs' medians, so the two can differ a little), with a 95% "
      "bootstrap interval that resamples runs, then steps; \"within noise\" where the interval holds 1. "
      "Repeated runs of one point differ by more than one run's steps, so a comparison needs at least two "
      "runs a side (`hetpar sweep --repeat K`).\n\n";
  if (!table.empty()) {
    text += "| comparison | tokens/s ratio | 95% interval | runs (point / reference) | verdict |\n"
            "|---|---|---|---|---|\n" + table;
  }
  const bool all_single = std::all_of(rows.begin(), rows.end(), [](const SpeedupNoise& r) {
    return std::max(r.point_runs, r.reference_runs) < 2;
  });
  if (all_single) {
    return text + "Every point and baseline ran once here: the speed-ups above are single measurements, with no "
                  "interval.\n";
  }
  if (!untested.empty()) text += (table.empty() ? "" : "\n") + std::string("No interval:\n") + untested;
  return text;
}

}  // namespace hetpar
