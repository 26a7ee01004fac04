// The pipeline's stage split and 1F1B order against hand-written tables.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "parallel/pipeline_schedule.hpp"

namespace hetpar {
namespace {

using Op = PipelineOp;
constexpr auto F = PipelineOp::kForward;
constexpr auto B = PipelineOp::kBackward;

TEST(PipelineStages, ContiguousAndTheFirstStagesTakeTheRemainder) {
  EXPECT_EQ(stage_layers(8, 2, 0), (StageLayers{0, 4}));
  EXPECT_EQ(stage_layers(8, 2, 1), (StageLayers{4, 4}));
  // 10 layers over 4 stages: 3, 3, 2, 2.
  EXPECT_EQ(stage_layers(10, 4, 0), (StageLayers{0, 3}));
  EXPECT_EQ(stage_layers(10, 4, 1), (StageLayers{3, 3}));
  EXPECT_EQ(stage_layers(10, 4, 2), (StageLayers{6, 2}));
  EXPECT_EQ(stage_layers(10, 4, 3), (StageLayers{8, 2}));
  for (int64_t layer = 0; layer < 10; ++layer) {
    const int s = stage_of_layer(10, 4, layer);
    const StageLayers r = stage_layers(10, 4, s);
    EXPECT_TRUE(layer >= r.first && layer < r.first + r.count) << layer;
  }
  EXPECT_EQ(stage_of_layer(10, 4, 2), 0);
  EXPECT_EQ(stage_of_layer(10, 4, 3), 1);
  EXPECT_EQ(stage_of_layer(10, 4, 9), 3);
}

TEST(OneFOneB, TwoStagesFourMicroBatches) {
  EXPECT_EQ(one_f_one_b(2, 0, 4),
            (std::vector<Op>{{F, 0}, {F, 1}, {B, 0}, {F, 2}, {B, 1}, {F, 3}, {B, 2}, {B, 3}}));
  EXPECT_EQ(one_f_one_b(2, 1, 4),
            (std::vector<Op>{{F, 0}, {B, 0}, {F, 1}, {B, 1}, {F, 2}, {B, 2}, {F, 3}, {B, 3}}));
}

TEST(OneFOneB, FourStagesFourMicroBatches) {
  EXPECT_EQ(one_f_one_b(4, 0, 4),
            (std::vector<Op>{{F, 0}, {F, 1}, {F, 2}, {F, 3}, {B, 0}, {B, 1}, {B, 2}, {B, 3}}));
  EXPECT_EQ(one_f_one_b(4, 1, 4),
            (std::vector<Op>{{F, 0}, {F, 1}, {F, 2}, {B, 0}, {F, 3}, {B, 1}, {B, 2}, {B, 3}}));
  EXPECT_EQ(one_f_one_b(4, 2, 4),
            (std::vector<Op>{{F, 0}, {F, 1}, {B, 0}, {F, 2}, {B, 1}, {F, 3}, {B, 2}, {B, 3}}));
  EXPECT_EQ(one_f_one_b(4, 3, 4),
            (std::vector<Op>{{F, 0}, {B, 0}, {F, 1}, {B, 1}, {F, 2}, {B, 2}, {F, 3}, {B, 3}}));
}

// Simulated with unit-time ops and blocking transfers: every stage's order
// completes (no stage waits on one that waits on it), each micro-batch runs
// forward once and backward once per stage, and a stage never holds more
// than p - s micro-batches' activations.
TEST(OneFOneB, RunsToTheEndWithBoundedActivations) {
  for (int p : {1, 2, 3, 4}) {
    for (int64_t m : {static_cast<int64_t>(p), static_cast<int64_t>(p) + 3, static_cast<int64_t>(2 * p + 1)}) {
      std::vector<std::vector<Op>> orders;
      for (int s = 0; s < p; ++s) orders.push_back(one_f_one_b(p, s, m));
      std::vector<size_t> next(p, 0);
      std::set<std::pair<int, int64_t>> forward_done, backward_done;  // (stage, micro)
      std::map<int, int64_t> live, peak;
      bool progressed = true;
      while (progressed) {
        progressed = false;
        for (int s = 0; s < p; ++s) {
          if (next[s] == orders[s].size()) continue;
          const Op op = orders[s][next[s]];
          const bool ready = op.kind == F ? (s == 0 || forward_done.count({s - 1, op.micro}))
                                          : (s == p - 1 ? forward_done.count({s, op.micro}) > 0
                                                        : backward_done.count({s + 1, op.micro}) > 0);
          if (!ready) continue;
          (op.kind == F ? forward_done : backward_done).insert({s, op.micro});
          live[s] += op.kind == F ? 1 : -1;
          peak[s] = std::max(peak[s], live[s]);
          ++next[s];
          progressed = true;
        }
      }
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(next[s], orders[s].size()) << "p " << p << " m " << m << ": stage " << s << " is stuck";
        EXPECT_EQ(live[s], 0);
        EXPECT_LE(peak[s], p - s) << "p " << p << " m " << m << " stage " << s;
      }
    }
  }
}

TEST(OneFOneB, BubbleFraction) {
  EXPECT_DOUBLE_EQ(one_f_one_b_bubble_fraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(one_f_one_b_bubble_fraction(2, 4), 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(one_f_one_b_bubble_fraction(4, 8), 3.0 / 11.0);
}

}  // namespace
}  // namespace hetpar
