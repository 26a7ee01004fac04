#include "train/step_report.hpp"

#include <ATen/ATen.h>

namespace hetpar {

StepReport gather_step_report(Group& world, double loss_share, double peak_memory_bytes,
                              const PhaseTimer::Seconds& phases, const at::Device& device) {
  // Row per rank: loss share, peak memory, then the phases.
  constexpr int kFields = 2 + kPhaseCount;
  at::Tensor mine = at::empty({1, kFields}, at::kDouble);
  auto row = mine.accessor<double, 2>();
  row[0][0] = loss_share;
  row[0][1] = peak_memory_bytes;
  for (int p = 0; p < kPhaseCount; ++p) row[0][2 + p] = phases[p];
  const at::Tensor all = world.all_gather(mine.to(device)).cpu();
  auto rows = all.accessor<double, 2>();

  StepReport report;
  double most_busy = -1;
  for (int r = 0; r < all.size(0); ++r) {
    report.loss += rows[r][0];
    report.peak_memory_bytes = std::max(report.peak_memory_bytes, rows[r][1]);
    report.peak_memory_by_rank.push_back(rows[r][1]);
    double busy = 0;
    for (int p = 0; p < kPhaseCount; ++p) busy += p == static_cast<int>(Phase::kWait) || p == static_cast<int>(Phase::kPipelineWait) ? 0 : rows[r][2 + p];
    if (busy > most_busy) {
      most_busy = busy;
      report.critical_rank = r;
    }
  }
  for (int p = 0; p < kPhaseCount; ++p) report.critical_phases[p] = rows[report.critical_rank][2 + p];
  return report;
}

}  // namespace hetpar
