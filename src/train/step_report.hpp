// What rank 0 learns about a step from every rank, in one all-gather: the
// step's loss, the peak memory (and tensor memory) of the busiest rank in memory, and the phase
// times of the critical rank (the one with the most time not spent waiting:
// the rank the others wait for).
#pragma once

#include <vector>

#include "dist/group.hpp"
#include "metrics/phase_timer.hpp"

namespace hetpar {

struct StepReport {
  double loss = 0;                  // sum of every rank's loss share
  int critical_rank = 0;
  PhaseTimer::Seconds critical_phases{};
  double peak_memory_bytes = 0;     // max over ranks of each one's peak (dist/device.hpp)
  std::vector<double> peak_memory_by_rank;  // each rank's, by job rank
  double peak_tensor_bytes = 0;     // max over ranks of each one's tensor peak (dist/device.hpp)
  std::vector<double> peak_tensor_by_rank;  // each rank's, by job rank
};

// Called by every rank after the step's work is done (the gather moves a
// small tensor on `device`, as the world's backend needs).
StepReport gather_step_report(Group& world, double loss_share, double peak_memory_bytes, double peak_tensor_bytes,
                              const PhaseTimer::Seconds& phases, const at::Device& device);

}  // namespace hetpar
