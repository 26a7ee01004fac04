#include "train/step_report.hpp"

#include <ATen/ATen.h>

namespace hetpar {

StepReport gather_step_report(Group& world, double loss_share, double peak_memory_bytes, double peak_tensor_bytes,
                              const PhaseTimer::Seconds& phases, const at::Device& device) {
  // Row per rank: loss share, peak memory, peak tensor memory, then the phases.
  constexpr int kFirstPhase = 3;
  constexpr int kFields = kFirstPhase + kPhaseCount;
  at::Tensor mine = at::empty({1, kFields}, at::kDouble);
  auto row = mine.accessor<double, 2>();
  row[0][0] = loss_share;
  row[0][1] = peak_memory_bytes;
  row[0][2] = peak_tensor_bytes;
  for (int p = 0; p < kPhaseCount; ++p) row[0][kFirstPhase + p] = phases[p];
  const at::Tensor all = world.all_gather(mine.to(device)).cpu();
  auto rows = all.accessor<double, 2>();

  StepReport report;
  double most_busy = -1;
  for (int r = 0; r < all.size(0); ++r) {
    report.loss += rows[r][0];
    report.peak_memory_bytes = std::max(report.peak_memory_bytes, rows[r][1]);
    report.peak_memory_by_rank.push_back(rows[r][1]);
    report.peak_tensor_bytes = std::max(report.peak_tensor_bytes, rows[r][2]);
    report.peak_tensor_by_rank.push_back(rows[r][2]);
    double busy = 0;
    for (int p = 0; p < kPhaseCount; ++p) busy += p == static_cast<int>(Phase::kWait) || p == static_cast<int>(Phase::kPipelineWait) ? 0 : rows[r][kFirstPhase + p];
    if (busy > most_busy) {
      most_busy = busy;
      report.critical_rank = r;
    }
  }
  for (int p = 0; p < kPhaseCount; ++p) report.critical_phases[p] = rows[report.critical_rank][kFirstPhase + p];
  return report;
}

}  // namespace hetpar
