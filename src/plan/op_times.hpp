// The step-time model's op half: how long each op of a step takes on one
// rank, from the run's shapes and a calibration profile. A transformer
// layer's forward is its matmuls (each at the GEMM rate measured nearest its
// shape, sharded by TP), its attention (measured SDPA, split over CP), its
// norms, activations and residual adds (bytes at the measured bandwidth) and
// its TP and CP collectives (latency + bytes / bandwidth); the backward is
// twice the matmuls and memory-bound work, the measured attention backward
// and the same collectives. A frozen encoder runs no backward (its projector
// does). The schedule half (plan/step_model.hpp) turns these into a step.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "plan/profile.hpp"
#include "plan/step_model.hpp"

namespace hetpar {

OpTimes op_times(const RunConfig& config, const Profile& profile);

// Each op's time, and the compute every rank does in a step together (what
// ranks sharing cores must fit into them).
struct OpEstimate {
  OpTimes times;
  double compute_seconds = 0;
};
OpEstimate estimate_ops(const RunConfig& config, const Profile& profile);

// Why `profile` cannot price `config`, or "": a profile measures its
// matmuls and activations in one precision (element_bytes 4: fp32, 2: bf16),
// so a run in the other would get that precision's rates and widths (a CPU
// calibration measures fp32 only). run.precision = "auto" takes the profile's.
std::string precision_problem(const RunConfig& config, const Profile& profile);

// A lower bound of predict_step's seconds without simulating the step.
double step_lower_bound(const RunConfig& config, const OpEstimate& ops, const Profile& profile);
StepPrediction predict_step(const RunConfig& config, const OpEstimate& ops, const Profile& profile);

// The model's whole prediction for a run: op_times, then the schedule; with
// more ranks than cores, at least the time the cores need for every rank's
// compute (a rank that waits lends its core to another meanwhile).
// The difference, where the cores' bound sets the step, is the phases' core_wait.
StepPrediction predict_step(const RunConfig& config, const Profile& profile);
inline double predict_step_seconds(const RunConfig& config, const Profile& profile) {
  return predict_step(config, profile).seconds;
}

}  // namespace hetpar
