#include "metrics/run_summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>

namespace hetpar {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at)), hi = static_cast<size_t>(std::ceil(at));
  return values[lo] + (values[hi] - values[lo]) * (at - static_cast<double>(lo));
}

nlohmann::json summarize_steps(const std::vector<nlohmann::json>& steps, int64_t warmup_steps) {
  const bool skip = static_cast<int64_t>(steps.size()) > warmup_steps;
  std::vector<const nlohmann::json*> timed;
  for (size_t i = skip ? static_cast<size_t>(warmup_steps) : 0; i < steps.size(); ++i) timed.push_back(&steps[i]);
  auto column = [&](const char* field) {
    std::vector<double> v;
    for (const nlohmann::json* s : timed) {
      if (s->contains(field) && (*s)[field].is_number()) v.push_back((*s)[field].get<double>());
    }
    return v;
  };
  nlohmann::json out = {{"timed_steps", timed.size()}, {"warmup_steps", skip ? warmup_steps : 0}};
  const std::vector<double> seconds = column("step_seconds");
  out["step_seconds_median"] = quantile(seconds, 0.5);
  out["step_seconds_p10"] = quantile(seconds, 0.1);
  out["step_seconds_p90"] = quantile(seconds, 0.9);
  for (const char* field : {"tflops_per_gpu", "mfu", "tokens_per_second", "image_tokens_per_second",
                            "samples_per_second", "flops"}) {
    const std::vector<double> v = column(field);
    if (!v.empty()) out[field == std::string("flops") ? "flops_per_step" : field] = quantile(v, 0.5);
  }
  double peak = 0;
  for (const nlohmann::json& s : steps) peak = std::max(peak, s.value("peak_memory_mib", 0.0));
  out["peak_memory_mib"] = peak;
  double tensor_peak = 0;  // tensor storage alone (dist/device.hpp), what the memory model predicts less the runtime
  for (const nlohmann::json& s : steps) tensor_peak = std::max(tensor_peak, s.value("peak_tensor_mib", 0.0));
  if (tensor_peak > 0) out["peak_tensor_mib"] = tensor_peak;
  std::vector<double> by_stage;  // pipelined runs: each stage's peak over the run
  for (const nlohmann::json& s : steps) {
    const auto it = s.find("peak_memory_mib_by_stage");
    if (it == s.end() || !it->is_array()) continue;
    by_stage.resize(std::max(by_stage.size(), it->size()), 0.0);
    for (size_t i = 0; i < it->size(); ++i) by_stage[i] = std::max(by_stage[i], (*it)[i].get<double>());
  }
  if (!by_stage.empty()) out["peak_memory_mib_by_stage"] = by_stage;
  nlohmann::json by_part = nlohmann::json::object();  // each kind of rank's tensor peak over the run
  for (const nlohmann::json& s : steps) {
    const auto it = s.find("peak_tensor_mib_by_part");
    if (it == s.end() || !it->is_object()) continue;
    for (const auto& [what, mib] : it->items()) by_part[what] = std::max(by_part.value(what, 0.0), mib.get<double>());
  }
  if (!by_part.empty()) out["peak_tensor_mib_by_part"] = by_part;
  std::map<std::string, std::vector<double>> phases;
  for (const nlohmann::json* s : timed) {
    if (!s->contains("phases")) continue;
    for (const auto& [name, value] : (*s)["phases"].items()) phases[name].push_back(value.get<double>());
  }
  out["phases"] = nlohmann::json::object();
  for (const auto& [name, values] : phases) out["phases"][name] = quantile(values, 0.5);
  return out;
}

bool is_diverged(const nlohmann::json& step) {
  const auto it = step.find("diverged");
  return it != step.end() && it->is_boolean() && it->get<bool>();
}

std::optional<int64_t> diverged_step(const std::vector<nlohmann::json>& steps) {
  for (const nlohmann::json& s : steps) {
    if (is_diverged(s)) return s.at("step").get<int64_t>();
  }
  return std::nullopt;
}

LossCurveDifference loss_curve_difference(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                                          const char* key) {
  const auto has_value = [&](const nlohmann::json& s) {
    return !is_diverged(s) && s.contains(key) && s[key].is_number();
  };
  std::map<int64_t, double> losses_a;
  for (const nlohmann::json& s : a) {
    if (has_value(s)) losses_a[s.at("step").get<int64_t>()] = s.at(key).get<double>();
  }
  LossCurveDifference d;
  for (const nlohmann::json& s : b) {
    if (!has_value(s)) continue;
    const auto it = losses_a.find(s.at("step").get<int64_t>());
    if (it == losses_a.end()) continue;
    const double loss_b = s.at(key).get<double>();
    const double abs_diff = std::abs(it->second - loss_b);
    const double rel_diff = abs_diff / std::max(std::abs(loss_b), 1e-30);
    ++d.compared;
    d.max_abs = std::max(d.max_abs, abs_diff);
    if (rel_diff >= d.max_rel) d.max_rel = rel_diff, d.worst_step = it->first;
  }
  return d;
}

std::vector<nlohmann::json> read_steps(const std::string& run) {
  const std::string path = std::filesystem::is_directory(run) ? run + "/steps.jsonl" : run;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<nlohmann::json> steps;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const bool torn = in.eof();  // the file ended before this line's newline
    try {
      nlohmann::json record = nlohmann::json::parse(line);
      record.at("step").get<int64_t>();
      if (!is_diverged(record)) record.at("loss").get<double>();
      steps.push_back(std::move(record));
    } catch (const std::exception& e) {
      if (torn) break;
      throw std::runtime_error(path + ":" + std::to_string(line_number) + ": not a step record with step and loss: " +
                               e.what());
    }
  }
  if (steps.empty()) throw std::runtime_error(path + ": no steps");
  return steps;
}

std::vector<nlohmann::json> steps_through(const std::string& run_dir, int64_t last_step) {
  const std::string path = run_dir + "/steps.jsonl";
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path + " is missing: the record of the steps before the checkpoint is gone (the run's "
                             "summary would start at the checkpoint's step)");
  }
  std::vector<nlohmann::json> kept;
  for (nlohmann::json& s : read_steps(run_dir)) {
    const int64_t step = s.at("step").get<int64_t>();
    if (step > last_step) continue;
    if (step != static_cast<int64_t>(kept.size()) + 1) {
      throw std::runtime_error(fmt::format("{}: step {} follows step {}: not the record of one run's steps 1 to {}",
                                           path, step, kept.size(), last_step));
    }
    kept.push_back(std::move(s));
  }
  if (static_cast<int64_t>(kept.size()) != last_step) {
    throw std::runtime_error(fmt::format("{} holds steps 1 to {}, but the checkpoint is of step {}", path,
                                         kept.size(), last_step));
  }
  return kept;
}

}  // namespace hetpar
