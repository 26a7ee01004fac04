// The step-time model's schedule half on cases worked by hand: placements
// that run micro-batch after micro-batch add up, a pipeline of equal stages
// shows 1F1B's bubble, run-ahead across the boundary goes at the slower
// side's pace, and the colocated encoder's two orders keep their difference.
#include <gtest/gtest.h>

#include "config/run_config.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "plan/step_model.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

// The tiny workload: 2 encoder and 2 LLM layers, a global batch of 8.
RunConfig config_of(const std::vector<std::string>& sets) {
  return load_run_config(source_tree_path("/workloads/tiny.toml"), sets);
}

OpTimes times(int encoder_stages, double e_f, double e_b, int llm_stages, double f, double b) {
  OpTimes t;
  t.encoder_forward.assign(encoder_stages, e_f);
  t.encoder_backward.assign(encoder_stages, e_b);
  t.llm_forward.assign(llm_stages, f);
  t.llm_backward.assign(llm_stages, b);
  return t;
}

TEST(StepModel, MicroBatchAfterMicroBatchAddsUp) {
  // 4 micro-batches of 2 samples; per micro-batch E 0.5, F 1, B 2, e 1.
  OpTimes t = times(1, 0.5, 1, 1, 1, 2);
  t.per_step = 0.25;
  EXPECT_DOUBLE_EQ(predict_step_seconds(config_of({}), t), 4 * 4.5 + 0.25);
  // Colocated, each micro-batch's rows and gradients also cross the boundary.
  t.boundary_forward = 0.1;
  t.boundary_backward = 0.2;
  const RunConfig colocated =
      config_of({"layout.placement=colocated", "layout.encoder.dp=2", "layout.llm.tp=2"});
  EXPECT_DOUBLE_EQ(predict_step_seconds(colocated, t), 4 * 4.8 + 0.25);
}

TEST(StepModel, EqualStagesShowTheOneFOneBBubble) {
  // 4 stages of one layer, 8 micro-batches of 1, F 1 and B 2 on every stage, no encoder work.
  const RunConfig pp4 = config_of({"llm.layers=4", "layout.llm.pp=4", "data.micro_batch_size=1"});
  const double step = predict_step_seconds(pp4, times(1, 0, 0, 4, 1, 2));
  EXPECT_DOUBLE_EQ(step, (8 + 3) * 3.0);
  EXPECT_DOUBLE_EQ((step - 8 * 3.0) / step, one_f_one_b_bubble_fraction(4, 8));
  // A transfer between stages lengthens every op that waits on one.
  OpTimes slow = times(1, 0, 0, 4, 1, 2);
  slow.stage_transfer = 0.5;
  EXPECT_GT(predict_step_seconds(pp4, slow), step);
}

TEST(StepModel, RunAheadGoesAtTheSlowerSidesPace) {
  // Non-colocated, 8 micro-batches of 1, the encoder 2 ahead.
  const RunConfig run = config_of({"layout.placement=non-colocated", "data.micro_batch_size=1"});
  // Encoder slower (E 2 + e 2 a micro-batch, LLM F 1 + B 1): the encoder
  // never waits. Its order is E0 E1 e0 E2 e1 ... E7 e6 e7: E7 ends at 28, the
  // LLM's F7 + B7 run while it back-propagates micro-batch 6, and e7 ends at 32.
  EXPECT_DOUBLE_EQ(predict_step_seconds(run, times(1, 2, 2, 1, 1, 1)), 8 * 4.0);
  // LLM slower (E 0.5 + e 0.5, F 2 + B 2): the LLM never waits after the first E.
  EXPECT_DOUBLE_EQ(predict_step_seconds(run, times(1, 0.5, 0.5, 1, 2, 2)), 0.5 + 8 * 4.0 + 0.5);
  // Alternating (run_ahead 1): nothing overlaps.
  const RunConfig alternate = config_of({"layout.placement=non-colocated", "data.micro_batch_size=1", "layout.run_ahead=1"});
  EXPECT_DOUBLE_EQ(predict_step_seconds(alternate, times(1, 2, 2, 1, 1, 1)), 8 * 6.0);
}

TEST(StepModel, AnEncoderPipelineAheadOfTheLlmIsOneFOneBOverAllStages) {
  // Encoder PP2 run 2 ahead of a 1-stage LLM, every op 1: 1F1B over 3 equal stages.
  const RunConfig run = config_of({"layout.placement=non-colocated", "layout.encoder.pp=2", "data.micro_batch_size=1"});
  EXPECT_DOUBLE_EQ(predict_step_seconds(run, times(2, 1, 1, 1, 1, 1)), (8 + 2) * 2.0);
}

TEST(StepModel, TheColocatedEncoderOrdersKeepTheirDifference) {
  // LLM PP2 with 4 micro-batches of 2: the hand-worked timeline of
  // colocated_pipeline_schedule (F 1, B 2, E 1, e 2): bubble_fill 25 with at
  // most 3 in flight, whole_step 27.
  const std::vector<std::string> base{"layout.placement=colocated", "layout.encoder.dp=2", "layout.llm.pp=2"};
  std::vector<std::string> whole = base;
  whole.push_back("layout.encoder_schedule=whole_step");
  const OpTimes t = times(1, 1, 2, 2, 1, 2);
  EXPECT_DOUBLE_EQ(predict_step_seconds(config_of(base), t), 25);
  EXPECT_DOUBLE_EQ(predict_step_seconds(config_of(whole), t), 27);
}

TEST(StepModel, OneTimePerStageOfEachModuleIsRequired) {
  const RunConfig pp2 = config_of({"layout.llm.pp=2"});
  EXPECT_THROW(predict_step_seconds(pp2, times(1, 1, 1, 1, 1, 1)), std::invalid_argument);
  EXPECT_THROW(predict_step_seconds(config_of({}), times(2, 1, 1, 1, 1, 1)), std::invalid_argument);
}

}  // namespace
}  // namespace hetpar
