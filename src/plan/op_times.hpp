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

#include "config/run_config.hpp"
#include "plan/profile.hpp"
#include "plan/step_model.hpp"

namespace hetpar {

OpTimes op_times(const RunConfig& config, const Profile& profile);

// The model's whole prediction for a run: op_times, then the schedule; with
// more ranks than cores, at least the time the cores need for every rank's
// compute (a rank that waits lends its core to another meanwhile).
double predict_step_seconds(const RunConfig& config, const Profile& profile);

}  // namespace hetpar
