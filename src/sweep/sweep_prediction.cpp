#include "sweep/sweep_prediction.hpp"

#include <map>
#include <stdexcept>

#include "plan/memory_model.hpp"
#include "plan/op_times.hpp"

namespace hetpar {

namespace {

void add_prediction(nlohmann::json& r, const RunConfig& config, const Profile& profile) {
  const auto measured = r.find("step_seconds_median");
  if (r.value("status", "") != "ok" || measured == r.end() || !measured->is_number() || measured->get<double>() <= 0) {
    return;
  }
  if (const std::string why = precision_problem(config, profile); !why.empty()) {
    r["prediction_failed"] = why;  // no prediction rather than one of another precision
    return;
  }
  try {
    const double predicted = predict_step_seconds(config, profile);
    r["predicted_step_seconds"] = predicted;
    r["prediction_error"] = predicted / measured->get<double>() - 1;
    // The fullest rank's peak memory, against the run's (the largest of its
    // ranks' peak resident memory), and without the runtime's reserved part
    // against the largest tensor peak of its ranks (dist/device.hpp).
    const RankMemory fullest = fullest_rank(rank_memory(config, memory_assumptions(profile)));
    const double memory = fullest.total() / (1 << 20), tensors = (fullest.total() - fullest.reserved) / (1 << 20);
    r["predicted_peak_memory_mib"] = memory;
    r["predicted_tensor_mib"] = tensors;
    if (const double peak = r.value("peak_memory_mib", 0.0); peak > 0) r["memory_prediction_error"] = memory / peak - 1;
    if (const double peak = r.value("peak_tensor_mib", 0.0); peak > 0) r["tensor_prediction_error"] = tensors / peak - 1;
  } catch (const std::exception& e) {  // the measurement stands; the report says why no prediction sits beside it
    r["prediction_failed"] = e.what();
  }
}

}  // namespace

void add_predictions(std::vector<nlohmann::json>& records, const std::vector<SweepRun>& runs, const Profile& profile) {
  std::map<std::string, const RunConfig*> config_of;
  for (const SweepRun& run : runs) {
    if (run.config) config_of[run.id] = &*run.config;
  }
  for (nlohmann::json& r : records) {
    const auto it = config_of.find(r.value("run_id", ""));
    if (it == config_of.end()) continue;
    for (const char* stale : {"predicted_step_seconds", "prediction_error", "prediction_failed",
                              "predicted_peak_memory_mib", "memory_prediction_error", "predicted_tensor_mib",
                              "tensor_prediction_error"}) {
      r.erase(stale);
    }
    add_prediction(r, *it->second, profile);
  }
}

}  // namespace hetpar
