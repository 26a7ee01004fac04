#include "metrics/step_samples.hpp"

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "metrics/run_summary.hpp"

namespace hetpar {
namespace {

using nlohmann::json;

int64_t integer_field(const json& record, const char* key, const std::string& run) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_number_integer() || it->get<int64_t>() < 0) {
    throw std::runtime_error(run + ": the record has no " + key);
  }
  return it->get<int64_t>();
}

// One run's timed values of `field`; throws std::runtime_error saying what is wrong.
std::vector<double> timed_values(const json& record, const std::string& results_dir, const char* field) {
  const std::string run = record.value("run_id", "?");
  const auto dir = record.find("run_dir");
  if (dir == record.end() || !dir->is_string()) throw std::runtime_error(run + ": the record has no run_dir");
  const std::string path = (std::filesystem::path(results_dir) / dir->get<std::string>()).string();
  const int64_t warmup = integer_field(record, "warmup_steps", run);
  const int64_t timed = integer_field(record, "timed_steps", run);
  const std::vector<json> steps = read_steps(path);  // throws naming the file
  std::vector<double> values;
  for (size_t i = static_cast<size_t>(warmup); i < steps.size(); ++i) {
    const auto v = steps[i].find(field);
    if (v == steps[i].end() || !v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
      throw std::runtime_error(path + "/steps.jsonl: step " + std::to_string(i + 1) + " has no positive " + field);
    }
    values.push_back(v->get<double>());
  }
  if (static_cast<int64_t>(values.size()) != timed) {
    throw std::runtime_error(path + "/steps.jsonl has " + std::to_string(values.size()) +
                             " steps after the warm-up; the record summarised " + std::to_string(timed));
  }
  return values;
}

}  // namespace

size_t StepSamples::count() const {
  size_t n = 0;
  for (const std::vector<double>& run : runs) n += run.size();
  return n;
}

StepSamples read_step_samples(const std::vector<const json*>& records, const std::string& results_dir,
                              const char* field) {
  StepSamples samples;
  if (results_dir.empty()) {
    samples.problem = "no results directory to read the runs from";
    return samples;
  }
  try {
    for (const json* record : records) samples.runs.push_back(timed_values(*record, results_dir, field));
  } catch (const std::exception& e) {
    samples.runs.clear();
    samples.problem = e.what();
  }
  return samples;
}

}  // namespace hetpar
