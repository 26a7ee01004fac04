#include "sweep/sweep_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "metrics/point_repeats.hpp"
#include "metrics/prediction_order.hpp"
#include "sweep/speedup_noise.hpp"
#include "sweep/sweep_groups.hpp"
#include "util/durable_file.hpp"

namespace hetpar {
namespace {

using Json = nlohmann::json;

double number(const Json& r, const char* field) {
  return r.contains(field) && r[field].is_number() ? r[field].get<double>() : 0.0;
}

std::string ratio_text(const Json& r, const char* field) {
  return r.contains(field) && r[field].is_number() ? fmt::format("{:.3f}x", r[field].get<double>()) : "-";
}

std::string side_by_side(const std::vector<const Json*>& ok_runs) {
  std::string out =
      "| setting | colocated / uniform TFLOPS/GPU | non-colocated / colocated tokens/s | non-colocated / colocated "
      "TFLOPS/GPU | non-colocated / uniform tokens/s |\n|---|---|---|---|---|\n";
  auto ratio = [](const Json* a, const Json* b, const char* field) {
    return a && b && number(*b, field) > 0 ? fmt::format("{:.3f}x", number(*a, field) / number(*b, field))
                                           : std::string("-");
  };
  for (const auto& [g, points] : points_by_setting(ok_runs)) {
    const Json* coloc = points.best.count("colocated") ? points.best.at("colocated") : nullptr;
    const Json* noncoloc = points.best.count("non-colocated") ? points.best.at("non-colocated") : nullptr;
    const Json* base = points.baseline;
    out += fmt::format("| {} | {} | {} | {} | {} |\n", g, ratio(coloc, base, "tflops_per_gpu"),
                       ratio(noncoloc, coloc, "tokens_per_second"), ratio(noncoloc, coloc, "tflops_per_gpu"),
                       ratio(noncoloc, base, "tokens_per_second"));
  }
  return out;
}

// Runs with an LLM pipeline: the critical rank's time blocked on a
// neighbouring stage as a share of the step, beside 1F1B's (p - 1) / (m + p - 1).
std::string pipeline_bubbles(const std::vector<const Json*>& rows) {
  std::string text;
  for (const Json* r : rows) {
    if (number(*r, "bubble_1f1b") <= 0) continue;
    const double step = number(*r, "step_seconds_median");
    const double wait = r->contains("phases") ? number((*r)["phases"], "pipeline_wait") : 0.0;
    std::string memory;
    if (const auto it = r->find("peak_memory_mib_by_stage"); it != r->end() && it->is_array()) {
      for (const Json& m : *it) memory += (memory.empty() ? "" : " / ") + fmt::format("{:.0f}", m.get<double>());
    }
    text += fmt::format("| {} | {} | {} | {} | {:.1f} | {:.1f} | {:.3f} | {:.3f} | {} |\n", r->value("run_id", ""),
                        r->value("label", ""), r->value("layout_llm", ""), r->value("micro_batches", 0), 1e3 * wait,
                        1e3 * step, step > 0 ? wait / step : 0.0, number(*r, "bubble_1f1b"), memory);
  }
  if (text.empty()) return "";
  return "\n## Pipeline bubble\n\nThe critical rank's time blocked on a neighbouring LLM stage (`pipeline_wait`) "
         "as a share of the step, beside 1F1B's (p - 1) / (m + p - 1) for equal stages, and the peak "
         "resident memory of each stage's ranks (first stage first).\n\n"
         "| run | label | llm layout | micro-batches | pipeline_wait ms | step ms | measured | 1F1B | peak MiB by stage |\n"
         "|---|---|---|---|---|---|---|---|---|\n" + text;
}

// The step-time model beside the measurement (sweep --profile): each row's
// error against its (pooled) median, the median and largest absolute error,
// and whether the model orders each group's rows as the measurement does.
constexpr double kOrderMargin = 0.05;
std::string predictions(const std::vector<const Json*>& rows) {
  std::string text, failed;
  std::vector<double> errors, memory_errors, tensor_errors;
  std::map<std::string, std::vector<const Json*>> groups;
  for (const Json* r : rows) {
    if (r->contains("prediction_failed")) {
      failed += fmt::format("- {}: no prediction: {}\n", r->value("run_id", ""), r->value("prediction_failed", ""));
    }
    if (!r->contains("predicted_step_seconds")) continue;
    const double measured = number(*r, "step_seconds_median"), predicted = number(*r, "predicted_step_seconds");
    const double error = predicted / measured - 1;
    errors.push_back(std::abs(error));
    groups[setting_of(*r)].push_back(r);
    // Measured, predicted and error cells for one memory figure, blank where it was not measured.
    const auto memory_cells = [&](const char* measured_key, const char* predicted_key, const char* error_key,
                                  std::vector<double>& errors_of) -> std::string {
      if (!r->contains(error_key)) return "| | | ";
      const double memory_error = number(*r, error_key);
      errors_of.push_back(std::abs(memory_error));
      return fmt::format("| {:.0f} | {:.0f} | {:+.1f}% ", number(*r, measured_key), number(*r, predicted_key),
                         100 * memory_error);
    };
    const std::string memory =
        memory_cells("peak_memory_mib", "predicted_peak_memory_mib", "memory_prediction_error", memory_errors) +
        memory_cells("peak_tensor_mib", "predicted_tensor_mib", "tensor_prediction_error", tensor_errors);
    text += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:+.1f}% {}|\n", r->value("run_id", ""), r->value("label", ""),
                        1e3 * measured, 1e3 * predicted, 100 * error, memory);
  }
  if (errors.empty()) return failed.empty() ? "" : "\n## Predicted step time\n\n" + failed;
  const auto median_of = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const double median = median_of(errors);
  std::string memory_summary;
  if (!memory_errors.empty()) {
    const double memory_median = median_of(memory_errors);  // sorts them
    memory_summary = fmt::format(" Peak memory (the memory model's fullest rank against the largest peak resident "
                                 "memory of the run's ranks): median |error| {:.1f}%, largest {:.1f}%.",
                                 100 * memory_median, 100 * memory_errors.back());
  }
  if (!tensor_errors.empty()) {
    const double tensor_median = median_of(tensor_errors);  // sorts them
    memory_summary += fmt::format(" Tensor memory (the same less the runtime's reserved part, against the largest "
                                  "tensor peak of the run's ranks): median |error| {:.1f}%, largest {:.1f}%.",
                                  100 * tensor_median, 100 * tensor_errors.back());
  }
  std::string misordered;
  for (auto& [group, members] : groups) {
    std::vector<TimedRun> timed;
    for (const Json* r : members) {
      timed.push_back({r->value("run_id", ""), number(*r, "step_seconds_median"), number(*r, "predicted_step_seconds")});
    }
    for (const auto& [a, b] : misordered_pairs(timed, kOrderMargin)) {
      misordered += fmt::format("{}{} ({} vs {})", misordered.empty() ? "" : ", ", group, a, b);
    }
  }
  return fmt::format("\n## Predicted step time\n\nThe step-time model (the sweep's profile, the run's shapes, its "
                     "schedule simulated) against the measured median: median |error| {:.1f}%, largest {:.1f}% over "
                     "{} runs; {}.{}\n\n| run | label | measured ms | predicted ms | error | measured MiB | "
                     "predicted MiB | memory error | tensor MiB | predicted tensor MiB | tensor error |\n"
                     "|---|---|---|---|---|---|---|---|---|---|---|\n",
                     100 * median, 100 * errors.back(), errors.size(),
                     misordered.empty() ? "every group's runs measured more than 5% apart in the measured order"
                                        : "runs measured more than 5% apart but predicted the other way round: " +
                                              misordered,
                     memory_summary) +
         text + (failed.empty() ? "" : "\n" + failed);
}

}  // namespace

SweepVerdict sweep_report(const std::vector<Json>& records, const SweepSpec& spec, const std::string& results_dir) {
  std::vector<const Json*> ok_runs;
  int failed = 0, invalid = 0, parity_misses = 0, points = 0;
  std::string failures;
  for (const Json& r : records) {
    const std::string status = r.value("status", "");
    if (status == "ok") ok_runs.push_back(&r);
    if (status == "invalid") {
      ++invalid;
      failures += fmt::format("- {} ({}): invalid: {}\n", r.value("run_id", ""), r.value("label", ""), r.value("error", ""));
    } else if (status != "ok") {  // failed, diverged, oom: outcomes without figures
      ++failed;
      const std::string error = r.value("error", "");
      failures += fmt::format("- {} ({}): {}: {}\n", r.value("run_id", ""), r.value("label", ""), status,
                              error.substr(0, error.find('\n')));
    }
  }
  std::string text = fmt::format("# Sweep {}: {} of {} runs ok, {} failed, diverged or out of memory, {} invalid\n\n",
                                 spec.name, ok_runs.size(), records.size(), failed, invalid);
  if (!ok_runs.empty()) {
    const Json& first = *ok_runs.front();
    text += fmt::format("device: {} | backend {} | commit {} | torch {} | ranks per core {}\n\n",
                        first.value("device", "?"), first.value("backend", "?"), first.value("commit", "?"),
                        first.value("torch_version", "?"), number(first, "ranks_per_core"));
  }
  // A point measured K times (sweep --repeat) is one row: the median of its runs' medians.
  const std::vector<Json> rows = pool_repeats(records);
  std::vector<const Json*> ok_rows;
  int repeats = 1;
  for (const Json& r : rows) {
    if (r.value("status", "") == "ok") ok_rows.push_back(&r);
    repeats = std::max(repeats, r.value("repeats", 1));
  }
  if (repeats > 1) {
    text += fmt::format("Each point and baseline measured up to {} times: a row holds the median of its runs' "
                        "medians, its speed-ups are over its baseline's pooled figures.\n\n", repeats);
  }
  text += "| run | label | placement | ranks | step ms | TFLOPS/GPU | x baseline | tokens/s | x baseline | "
          "loss max rel diff | parity |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Json* r : ok_rows) {
    const bool point = r->value("role", "") == "point";
    std::string parity = "baseline";
    if (point) {
      ++points;
      const bool held = r->value("loss_parity_ok", false);
      parity_misses += !held;
      parity = r->contains("loss_max_rel_diff") ? (held ? "ok" : "EXCEEDED") : "no baseline";
    }
    const int runs = r->value("repeats", 1);
    const std::string id = r->value("run_id", "") + (runs > 1 ? fmt::format(" (x{})", runs) : "");
    text += fmt::format("| {} | {} | {} | {} | {:.1f} | {:.5f} | {} | {:.0f} | {} | {} | {} |\n",
                        id, r->value("label", ""), r->value("placement", ""),
                        r->value("world_size", 0), 1e3 * number(*r, "step_seconds_median"),
                        number(*r, "tflops_per_gpu"), point ? ratio_text(*r, "speedup_tflops") : "-",
                        number(*r, "tokens_per_second"), point ? ratio_text(*r, "speedup_tokens") : "-",
                        point && r->contains("loss_max_rel_diff") ? fmt::format("{:.2e}", number(*r, "loss_max_rel_diff")) : "-",
                        parity);
  }
  text += "\n## Placements side by side\n\n" + side_by_side(ok_rows);
  if (!results_dir.empty()) text += speedup_noise_section(sweep_speedup_noise(records, results_dir));
  text += pipeline_bubbles(ok_rows);
  text += predictions(ok_rows);
  text += fmt::format("\nLoss parity (max relative difference of each point's loss curve from its baseline's, "
                      "and of its held-out losses where both evaluated, tolerance {:.0e}): {}\n", spec.loss_rtol,
                      parity_misses == 0 ? fmt::format("every point held it ({} points)", points)
                                         : fmt::format("{} of {} points did NOT hold it", parity_misses, points));
  // The held-out side alone, where the runs evaluated (run.eval_every).
  int held_out_points = 0;
  double held_out_worst = 0;
  for (const Json* r : ok_rows) {
    if (r->value("role", "") != "point" || !r->contains("eval_loss_max_rel_diff")) continue;
    ++held_out_points;
    held_out_worst = std::max(held_out_worst, number(*r, "eval_loss_max_rel_diff"));
  }
  if (held_out_points > 0) {
    text += fmt::format("Held-out losses: {} points evaluated beside their baselines, largest relative difference "
                        "{:.2e}\n", held_out_points, held_out_worst);
  }
  if (!failures.empty()) text += "\n## Not run or failed\n\n" + failures;
  return {text, failed == 0 && parity_misses == 0};
}

SweepVerdict write_sweep_report(const std::vector<Json>& records, const SweepSpec& spec, const std::string& path) {
  SweepVerdict verdict = sweep_report(records, spec, std::filesystem::path(path).parent_path().string());
  write_file_atomic(path, verdict.text);
  return verdict;
}

}  // namespace hetpar
