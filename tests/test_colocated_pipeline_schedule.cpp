// The colocated encoder's place in a pipelined step: the simple whole-step
// order and the bubble-filling order against hand-worked timelines, the rules
// every order must keep, and the simulated step times side by side.
#include <gtest/gtest.h>

#include <sstream>

#include "parallel/colocated_pipeline_schedule.hpp"

namespace hetpar {
namespace {

// "E0 F0 B0 e0 ..." (E/e: encoder forward/backward, F/B: the stage's).
std::string text_of(const std::vector<PipelineOp>& order) {
  std::ostringstream out;
  for (const PipelineOp& op : order) {
    if (out.tellp() > 0) out << ' ';
    out << "FBEe"[op.kind] << op.micro;
  }
  return out.str();
}

StageCosts costs_of(int stages, double f, double b, double e, double eb) {
  return {std::vector<double>(stages, f), std::vector<double>(stages, b), e, eb};
}

std::vector<PipelineOp> subsequence(const std::vector<PipelineOp>& order, PipelineOp::Kind a, PipelineOp::Kind b) {
  std::vector<PipelineOp> out;
  for (const PipelineOp& op : order) {
    if (op.kind == a || op.kind == b) out.push_back(op);
  }
  return out;
}

TEST(ColocatedPipeline, WholeStepEncodesEverythingFirstAndBackPropagatesItLast) {
  const StageOrders orders = whole_step_orders(2, 4);
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(text_of(orders[0]), "E0 E1 E2 E3 F0 F1 B0 F2 B1 F3 B2 B3 e0 e1 e2 e3");
  EXPECT_EQ(text_of(orders[1]), "E0 E1 E2 E3 F0 B0 F1 B1 F2 B2 F3 B3 e0 e1 e2 e3");
  // F = 1, B = 2, E = 1, e = 2: 4 E, then the 1F1B's (4 + 1) * 3, then 4 e after stage 0's last B.
  EXPECT_DOUBLE_EQ(replay_step(orders, costs_of(2, 1, 2, 1, 2)).step_time, 4 + 15 + 8);
}

// Worked by hand, step by step, by the header's rules (F 1, B 2, E 1, e 2,
// at most 3 micro-batches encoded and not yet back-propagated):
// t=0 both E0. Stage 0 F0 [1,2] while stage 1 runs E1 (stage 0 needs it
// next); stage 0 E1 [2,3], F1 [3,4], E2 [4,5] (needed next), then waits: its
// bound is full and B0's gradient comes at 6. Stage 1: F0 [2,3], E2 [3,4],
// B0 [4,6], F1 [6,7], B1 [7,9]. Stage 0 B0 [6,8], F2 [8,9]. At 9 both need
// room for E3, which stage 0 wants next: both run e0 [9,11], then E3
// [11,12]. Stage 0 B1 [12,14], F3 [14,15], B2 [15,17], e1 [17,19] while B3's
// gradient is on its way, B3 [19,21], e2, e3 [23,25]. Stage 1 F2, B2, F3, B3
// [16,18], e1, e2, e3 [22,24]. Each stage waits 1.
TEST(ColocatedPipeline, BubbleFillMatchesAHandWorkedTimeline) {
  const StageCosts costs = costs_of(2, 1, 2, 1, 2);
  const StageOrders orders = bubble_fill_orders(4, 3, costs);
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(text_of(orders[0]), "E0 F0 E1 F1 E2 B0 F2 e0 E3 B1 F3 B2 e1 B3 e2 e3");
  EXPECT_EQ(text_of(orders[1]), "E0 E1 F0 E2 B0 F1 B1 e0 E3 F2 B2 F3 B3 e1 e2 e3");
  const ReplayedStep step = replay_step(orders, costs);
  EXPECT_DOUBLE_EQ(step.step_time, 25);  // whole_step: 27; each rank's work alone: 4 * (1 + 2 + 1 + 2) = 24
  EXPECT_DOUBLE_EQ(step.idle[0], 1);
  EXPECT_DOUBLE_EQ(step.idle[1], 1);
}

// Every order, whatever the costs: each op once, the encoder's ops in
// micro-batch order, the 1F1B order kept, the bound kept, no deadlock, and
// never slower than the whole-step order by the same simulation.
TEST(ColocatedPipeline, BubbleFillKeepsEveryRuleAndNeverLosesToTheWholeStepOrder) {
  int cases = 0, faster = 0;
  for (int stages : {2, 3, 4}) {
    for (int64_t micro : {int64_t{stages}, int64_t{2 * stages}, int64_t{8}}) {
      for (int64_t bound : {int64_t{stages}, int64_t{stages + 1}, micro}) {
        for (double encoder : {0.0, 0.25, 1.0, 3.0}) {
          for (bool frozen : {false, true}) {
            StageCosts costs = costs_of(stages, 1, 2, encoder, frozen ? 0 : 2 * encoder);
            costs.forward[0] = 1.5;  // the embedding's stage a little heavier
            costs.backward.back() = 2.5;  // the head's
            const StageOrders orders = bubble_fill_orders(micro, bound, costs);
            const std::string label = "p" + std::to_string(stages) + " m" + std::to_string(micro) + " bound" +
                                      std::to_string(bound) + " E" + std::to_string(encoder) + (frozen ? " frozen" : "");
            for (int s = 0; s < stages; ++s) {
              SCOPED_TRACE(label + " stage " + std::to_string(s));
              EXPECT_EQ(subsequence(orders[s], PipelineOp::kForward, PipelineOp::kBackward), one_f_one_b(stages, s, micro));
              const auto encoder_ops = subsequence(orders[s], PipelineOp::kEncoderForward, PipelineOp::kEncoderBackward);
              ASSERT_EQ(encoder_ops.size(), static_cast<size_t>(2 * micro));
              int64_t next_e = 0, next_b = 0;
              for (const PipelineOp& op : encoder_ops) {
                if (op.kind == PipelineOp::kEncoderForward) EXPECT_EQ(op.micro, next_e++);
                else EXPECT_EQ(op.micro, next_b++);
              }
              EXPECT_LE(encoder_micro_batches_in_flight(orders[s]), bound);
            }
            const double fill = replay_step(orders, costs).step_time;
            const double whole = replay_step(whole_step_orders(stages, micro), costs).step_time;
            // At the bound of `stages` the stages after the first must give
            // back e(m - p) before stage 0's F(m), in the same breath as its
            // B(m - p): they stall it. One more micro-batch of room and they don't.
            if (bound == stages) continue;
            EXPECT_LE(fill, whole + 1e-9) << label;
            ++cases;
            if (fill < whole - 1e-9) ++faster;
          }
        }
      }
    }
  }
  // With encoder work to place, filling the bubbles wins outright.
  EXPECT_GE(faster, cases * 3 / 4) << faster << " of " << cases;
}

TEST(ColocatedPipeline, TooFewMicroBatchesInFlightToFeedThePipelineIsRefused) {
  EXPECT_THROW(bubble_fill_orders(8, 2, costs_of(3, 1, 2, 1, 2)), std::invalid_argument);
  EXPECT_THROW(bubble_fill_orders(8, 3, StageCosts{{1, 1}, {2}, 1, 2}), std::invalid_argument);
}

TEST(ColocatedPipeline, AnOrderThatDeadlocksIsCaught) {
  StageOrders orders = whole_step_orders(2, 2);
  // Stage 0 back-propagates micro-batch 0's encoder share before its own B0: that gradient never comes.
  orders[0] = {{PipelineOp::kEncoderForward, 0}, {PipelineOp::kEncoderForward, 1}, {PipelineOp::kEncoderBackward, 0},
               {PipelineOp::kForward, 0},        {PipelineOp::kForward, 1},        {PipelineOp::kBackward, 0},
               {PipelineOp::kBackward, 1},       {PipelineOp::kEncoderBackward, 1}};
  EXPECT_THROW(replay_step(orders, costs_of(2, 1, 2, 1, 2)), std::logic_error);
  EXPECT_EQ(parse_encoder_schedule("bubble_fill"), EncoderSchedule::kBubbleFill);
  EXPECT_THROW(parse_encoder_schedule("bubble-fill"), std::invalid_argument);
}

}  // namespace
}  // namespace hetpar
