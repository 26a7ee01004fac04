// What rank 0 learns about a step from every rank, in one all-gather: the
// step's loss, the peak memory of the busiest rank in memory, and the phase
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
  double peak_memory_bytes = 0;     // max over ranks of the peak resident set (CPU)
  std::vector<double> peak_memory_by_rank;  // each rank's, by job rank
};

StepReport gather_step_report(Group& world, double loss_share, const PhaseTimer::Seconds& phases);

// This process's peak resident set size so far, in bytes.
double peak_resident_bytes();

}  // namespace hetpar
