// A run's summary: medians and spread after the warm-up steps, the peak
// memory over every step, per-phase medians; loss-curve differences.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "metrics/run_summary.hpp"

namespace hetpar {
namespace {

nlohmann::json step(int n, double seconds, double loss, double phase) {
  return {{"step", n}, {"loss", loss}, {"step_seconds", seconds}, {"tflops_per_gpu", 1.0 / seconds},
          {"tokens_per_second", 100.0 / seconds}, {"peak_memory_mib", 10.0 * n},
          {"phases", {{"llm_forward", phase}, {"wait", 2 * phase}}}};
}

TEST(RunSummary, Quantiles) {
  EXPECT_DOUBLE_EQ(quantile({3, 1, 2}, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({0, 10}, 0.1), 1.0);
  EXPECT_TRUE(std::isnan(quantile({}, 0.5)));
}

TEST(RunSummary, WarmUpStepsAreLeftOut) {
  // Step 1 is slow (warm-up); the median of steps 2-6 is step 4's 2.0 s.
  const std::vector<nlohmann::json> steps = {step(1, 9.0, 6, 5), step(2, 1.0, 5, 1), step(3, 3.0, 4, 3),
                                             step(4, 2.0, 3, 2), step(5, 2.5, 2, 4), step(6, 1.5, 1, 0)};
  const nlohmann::json s = summarize_steps(steps, 1);
  EXPECT_EQ(s["timed_steps"], 5);
  EXPECT_EQ(s["warmup_steps"], 1);
  EXPECT_DOUBLE_EQ(s["step_seconds_median"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["step_seconds_p10"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(s["step_seconds_p90"].get<double>(), 2.8);
  EXPECT_DOUBLE_EQ(s["tflops_per_gpu"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["tokens_per_second"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(s["peak_memory_mib"].get<double>(), 60.0);  // every step counts for the peak
  EXPECT_DOUBLE_EQ(s["phases"]["llm_forward"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["phases"]["wait"].get<double>(), 4.0);
  EXPECT_FALSE(s.contains("mfu"));  // absent fields are not invented
}

TEST(RunSummary, EachPipelineStagesPeakIsItsLargestOverTheRun) {
  nlohmann::json a = step(1, 9.0, 6, 5), b = step(2, 1.0, 5, 1);
  a["peak_memory_mib_by_stage"] = {30.0, 12.0};
  b["peak_memory_mib_by_stage"] = {25.0, 14.0};
  const nlohmann::json s = summarize_steps({a, b}, 1);
  EXPECT_EQ(s["peak_memory_mib_by_stage"], nlohmann::json({30.0, 14.0}));  // warm-up included, like the peak
  EXPECT_FALSE(summarize_steps({step(1, 1.0, 1, 1)}, 0).contains("peak_memory_mib_by_stage"));  // not pipelined
}

TEST(RunSummary, EachPartsTensorPeakIsItsLargestOverTheRun) {
  nlohmann::json a = step(1, 9.0, 6, 5), b = step(2, 1.0, 5, 1);
  a["peak_tensor_mib_by_part"] = {{"encoder stage 0", 3.0}, {"llm stage 0", 8.0}};
  b["peak_tensor_mib_by_part"] = {{"encoder stage 0", 4.0}, {"llm stage 0", 7.0}};
  const nlohmann::json s = summarize_steps({a, b}, 1);
  EXPECT_EQ(s["peak_tensor_mib_by_part"], nlohmann::json({{"encoder stage 0", 4.0}, {"llm stage 0", 8.0}}));
  EXPECT_FALSE(summarize_steps({step(1, 1.0, 1, 1)}, 0).contains("peak_tensor_mib_by_part"));
}

TEST(RunSummary, ShortRunsCountEveryStep) {
  const nlohmann::json s = summarize_steps({step(1, 4.0, 1, 1), step(2, 2.0, 1, 1)}, 5);
  EXPECT_EQ(s["timed_steps"], 2);
  EXPECT_EQ(s["warmup_steps"], 0);
  EXPECT_DOUBLE_EQ(s["step_seconds_median"].get<double>(), 3.0);
}

TEST(RunSummary, LossCurveDifference) {
  const std::vector<nlohmann::json> a = {step(1, 1, 6.0, 0), step(2, 1, 5.0, 0), step(3, 1, 4.4, 0)};
  const std::vector<nlohmann::json> b = {step(1, 1, 6.0, 0), step(2, 1, 5.0, 0), step(3, 1, 4.0, 0),
                                         step(4, 1, 3.0, 0)};
  const LossCurveDifference d = loss_curve_difference(a, b);
  EXPECT_EQ(d.compared, 3);
  EXPECT_EQ(d.worst_step, 3);
  EXPECT_NEAR(d.max_abs, 0.4, 1e-12);
  EXPECT_NEAR(d.max_rel, 0.1, 1e-12);
  EXPECT_EQ(loss_curve_difference(a, a).max_rel, 0.0);
  // Held-out losses: only the steps both runs evaluated.
  std::vector<nlohmann::json> ea = a, eb = b;
  ea[1]["eval_loss"] = 4.5;
  eb[1]["eval_loss"] = 5.0;
  eb[2]["eval_loss"] = 1.0;
  const LossCurveDifference e = loss_curve_difference(ea, eb, "eval_loss");
  EXPECT_EQ(e.compared, 1);
  EXPECT_EQ(e.worst_step, 2);
  EXPECT_NEAR(e.max_rel, 0.1, 1e-12);
  EXPECT_EQ(loss_curve_difference(a, b, "eval_loss").compared, 0);
}

// A diverged run's last step has "diverged": true and a null loss (JSON has
// no NaN); it reads back, and parity is judged on the finite steps only.
TEST(RunSummary, DivergedStepsReadBackAndAreLeftOutOfParity) {
  const std::string path = ::testing::TempDir() + "/diverged_" + std::to_string(::getpid()) + ".jsonl";
  nlohmann::json broken = step(3, 1, 0, 0);
  broken["loss"] = std::nan("");  // dumped as null
  broken["diverged"] = true;
  std::ofstream(path) << step(1, 1, 6.0, 0).dump() << "\n" << step(2, 1, 5.0, 0).dump() << "\n" << broken.dump() << "\n";
  const std::vector<nlohmann::json> steps = read_steps(path);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_TRUE(steps[2]["loss"].is_null());
  EXPECT_EQ(diverged_step(steps), std::optional<int64_t>(3));
  const std::vector<nlohmann::json> healthy = {step(1, 1, 6.0, 0), step(2, 1, 5.0, 0), step(3, 1, 4.0, 0)};
  EXPECT_EQ(diverged_step(healthy), std::nullopt);
  const LossCurveDifference d = loss_curve_difference(steps, healthy);
  EXPECT_EQ(d.compared, 2);
  EXPECT_EQ(d.max_rel, 0.0);
  // A null loss without the flag is not a step record: a broken file, named.
  std::ofstream(path) << step(1, 1, 6.0, 0).dump() << "\n" << R"({"step": 2, "loss": null})" << "\n";
  try {
    read_steps(path);
    FAIL() << "accepted a null loss";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
  }
}

// A writer killed mid-line leaves a last line without its newline: left out.
// A broken line anywhere else is an error naming it.
TEST(RunSummary, ATornLastLineIsLeftOutAndABrokenOneNamed) {
  const std::string dir = ::testing::TempDir() + "/torn_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/steps.jsonl";
  std::ofstream(path) << step(1, 1, 6.0, 0).dump() << "\n" << step(2, 1, 5.0, 0).dump() << "\n" << R"({"step": 3, "lo)";
  EXPECT_EQ(read_steps(path).size(), 2u);
  EXPECT_EQ(steps_through(dir, 2).size(), 2u);
  std::ofstream(path) << step(1, 1, 6.0, 0).dump() << "\n" << R"({"step": 2, "lo)" << "\n" << step(3, 1, 4.0, 0).dump();
  try {
    read_steps(path);
    FAIL() << "accepted a broken line before the last";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
  }
  // Steps 1 to N as a resume from step N's checkpoint keeps them, or an error naming what is amiss.
  std::ofstream(path) << step(1, 1, 6.0, 0).dump() << "\n" << step(2, 1, 5.0, 0).dump() << "\n"
                      << step(3, 1, 4.0, 0).dump() << "\n";
  EXPECT_EQ(steps_through(dir, 2).size(), 2u);
  const auto refused = [&](int64_t last, const std::string& says) {
    try {
      steps_through(dir, last);
      ADD_FAILURE() << "accepted steps through " << last;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(4, "holds steps 1 to 3, but the checkpoint is of step 4");
  std::ofstream(path) << step(2, 1, 5.0, 0).dump() << "\n";
  refused(2, "step 2 follows step 0");
  std::filesystem::remove(path);
  refused(2, "steps.jsonl is missing");
  std::filesystem::remove_all(dir);
}

TEST(RunSummary, ReadStepsNamesTheProblem) {
  EXPECT_THROW(read_steps("/nonexistent/run"), std::runtime_error);
  try {
    read_steps("/nonexistent/run");
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run"), std::string::npos);
  }
}

}  // namespace
}  // namespace hetpar
