// The step-time model beside each measured run of a sweep: a finished run's
// record gains predicted_step_seconds (plan/op_times.hpp from the sweep's
// profile and the run's resolved config) and prediction_error (predicted /
// measured median - 1), and predicted_peak_memory_mib (plan/memory_model.hpp:
// the fullest rank) with memory_prediction_error against peak_memory_mib,
// and predicted_tensor_mib (the same less the runtime's reserved part) with
// tensor_prediction_error against peak_tensor_mib.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "plan/profile.hpp"
#include "sweep/sweep_spec.hpp"

namespace hetpar {

// Every record of `runs` that finished ok, replacing what an earlier profile predicted.
void add_predictions(std::vector<nlohmann::json>& records, const std::vector<SweepRun>& runs, const Profile& profile);

}  // namespace hetpar
