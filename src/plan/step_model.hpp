// The step-time model's schedule half: from how long each op takes on one
// rank, the time of one step as the trainer's schedule for the run's
// placement runs it, simulated op by op (replay_step in
// parallel/colocated_pipeline_schedule.hpp):
// - uniform or colocated without LLM PP: micro-batch after micro-batch, both
//   modules on every rank;
// - uniform with LLM PP: 1F1B, the encoder inside the first stage's ops;
// - colocated with LLM PP: 1F1B with every rank's encoder share placed by
//   layout.encoder_schedule (the trainer's own orders);
// - non-colocated: the encoder's stages and the LLM's as one pipeline, the
//   encoder's last stage layout.run_ahead micro-batches ahead of the LLM.
// The other half, the op times from a calibration profile and the run's
// shapes, fills OpTimes.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace hetpar {

struct OpTimes {
  // One micro-batch on one rank, per pipeline stage of the module (one entry
  // without PP). The encoder's is a rank's share of the micro-batch's images.
  std::vector<double> encoder_forward, encoder_backward;
  std::vector<double> llm_forward, llm_backward;
  double boundary_forward = 0, boundary_backward = 0;  // a micro-batch's rows, and their gradients
  double stage_transfer = 0;  // a micro-batch's activations (or their gradient) from a neighbouring stage
  double per_step = 0;        // gradient sync and optimizer, once a step
};

// Where the critical rank's step goes, in the trainer's phase names. The
// critical rank is the stage of either module that waits least; its phases
// add up to the step.
struct StepPhases {
  double encoder_forward = 0, encoder_backward = 0, llm_forward = 0, llm_backward = 0;
  double boundary = 0;       // rows out and gradients back
  double pipeline_wait = 0;  // waiting on a neighbouring stage or the other module
  double gradient_sync_and_optimizer = 0;
  double core_wait = 0;      // more ranks than cores: waiting for one (plan/op_times.hpp)
  double total() const;
};

struct StepPrediction {
  double seconds = 0;
  std::string critical;  // "llm stage 0", "encoder stage 1", ...
  StepPhases phases;
};

// One step. Throws std::invalid_argument when `times` has not one entry per
// stage of each module.
StepPrediction predict_step(const RunConfig& config, const OpTimes& times);
inline double predict_step_seconds(const RunConfig& config, const OpTimes& times) {
  return predict_step(config, times).seconds;
}

// A lower bound of predict_step's seconds, without simulating: the busiest
// stage's work and the once-a-step work (what a planner prunes with).
double busiest_stage_seconds(const RunConfig& config, const OpTimes& times);

}  // namespace hetpar
