// The step-time model's op half against hand computations: a GEMM's time
// from the nearest measured rate, a collective's from latency + bandwidth, a
// layer stack's forward as its matmul FLOPs over the rate, and more ranks
// than cores taking the cores' time for everyone's compute.
#include <gtest/gtest.h>

#include <fstream>

#include "config/run_config.hpp"
#include "metrics/prediction_order.hpp"
#include "plan/op_times.hpp"
#include "plan/profile.hpp"
#include "tests/plan_fixtures.hpp"

namespace hetpar {
namespace {

using nlohmann::json;

TEST(Profile, AGemmTakesItsFlopsAtTheNearestMeasuredRate) {
  json j = flat_profile(1e9, 2);
  j["gemm"].push_back({{"m", 1024}, {"n", 1024}, {"k", 1024}, {"flops_per_second", 4e9}});
  const Profile p = Profile::from_json(j, "test");
  EXPECT_DOUBLE_EQ(p.gemm_seconds(64, 64, 64), 2.0 * 64 * 64 * 64 / 1e9);
  EXPECT_DOUBLE_EQ(p.gemm_seconds(2048, 1024, 512), 2.0 * 2048 * 1024 * 512 / 4e9);  // nearer the large shape
  EXPECT_DOUBLE_EQ(p.gemm_seconds(0, 64, 64), 0);
}

TEST(Profile, ACollectiveTakesLatencyPlusBytesOverBandwidth) {
  json j = flat_profile(1e9, 2);
  j["collectives"][0] = {{"op", "all_reduce"}, {"group_size", 2}, {"latency_seconds", 1e-3}, {"bytes_per_second", 1e9}};
  j["collectives"].push_back({{"op", "all_reduce"}, {"group_size", 8}, {"latency_seconds", 4e-3}, {"bytes_per_second", 5e8}});
  const Profile p = Profile::from_json(j, "test");
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 2, 1e6), 1e-3 + 1e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 8, 1e6), 4e-3 + 2e-3);
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 3, 1e6), 1e-3 + 1e-3);  // 2 is nearer 3 than 8 is
  EXPECT_DOUBLE_EQ(p.collective_seconds("all_reduce", 1, 1e6), 0);           // one rank moves nothing
  EXPECT_THROW(p.collective_seconds("broadcast", 2, 1e6), std::runtime_error);
  // A fit that failed (noise swamped the sizes): the nearest measured size's time, scaled up beyond it.
  j["collectives"].push_back({{"op", "all_gather"}, {"group_size", 4}, {"fit_error", "times do not grow"},
                              {"points", {{{"bytes", 4096}, {"seconds", 2e-3}}, {{"bytes", 1048576}, {"seconds", 3e-3}}}}});
  const Profile unfitted = Profile::from_json(j, "test");
  EXPECT_DOUBLE_EQ(unfitted.collective_seconds("all_gather", 4, 4000), 2e-3);
  EXPECT_DOUBLE_EQ(unfitted.collective_seconds("all_gather", 4, 2 * 1048576.0), 6e-3);
}

TEST(Profile, BadProfilesAreRefusedNamingTheProblem) {
  const auto refused = [](const json& j, const std::string& says) {
    try {
      Profile::from_json(j, "p.json");
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(json{{"format", "other"}}, "p.json: not a hetpar profile");
  json no_gemm = flat_profile(1e9, 2);
  no_gemm.erase("gemm");
  refused(no_gemm, "p.json: no \"gemm\" measurements");
  json negative = flat_profile(-1, 2);
  refused(negative, "\"flops_per_second\" must be a positive number");
  try {
    Profile::load("/nonexistent/profile.json");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read the profile"), std::string::npos) << e.what();
  }
}

// The tiny LLM (hidden 64, 4 heads of 16, 2 KV heads, SwiGLU 192, 2 layers,
// vocab 512) on micro-batches of 2 x 128 tokens: per token and layer
// Q, K and V 2*64*(64+2*32), the output 2*64*64, the MLP 3*2*64*192:
// 98304 FLOPs; the head 2*64*512.
TEST(OpTimes, TheLlmForwardIsItsMatmulFlopsAtTheRate) {
  const RunConfig c = load_run_config(HETPAR_SOURCE_DIR "/workloads/tiny.toml", {});
  const OpTimes t = op_times(c, Profile::from_json(flat_profile(1e9, 2), "flat"));
  const double flops = 256.0 * (2 * 98304 + 2 * 64 * 512);
  ASSERT_EQ(t.llm_forward.size(), 1u);
  EXPECT_NEAR(t.llm_forward[0], flops / 1e9, 1e-6 * flops / 1e9);
  EXPECT_NEAR(t.llm_backward[0], 2 * flops / 1e9, 1e-6 * flops / 1e9);
  // Under TP2 each rank does half the matmuls.
  const RunConfig tp2 = load_run_config(HETPAR_SOURCE_DIR "/workloads/tiny.toml", {"layout.llm.tp=2"});
  EXPECT_NEAR(op_times(tp2, Profile::from_json(flat_profile(1e9, 2), "flat")).llm_forward[0], flops / 2e9, 1e-6 * flops / 1e9);
}

TEST(OpTimes, MoreRanksThanCoresTakeTheCoresTimeForEveryonesCompute) {
  // DP4, every rank equally busy: on 4 cores the schedule's time, on 2 twice it.
  const RunConfig dp4 = load_run_config(HETPAR_SOURCE_DIR "/workloads/tiny.toml",
                                        {"layout.llm.dp=4", "data.micro_batch_size=1"});
  const Profile four = Profile::from_json(flat_profile(1e9, 4), "4 cores");
  const Profile two = Profile::from_json(flat_profile(1e9, 2), "2 cores");
  const double alone = predict_step_seconds(dp4, op_times(dp4, four));
  EXPECT_NEAR(predict_step_seconds(dp4, four), alone, 1e-9);
  EXPECT_NEAR(predict_step_seconds(dp4, two), 2 * alone, 1e-3 * alone);
}

// Runs measured closer than the margin may come out either way; further apart
// their order must hold.
TEST(PredictionOrder, OnlyRunsMeasuredApartMustKeepTheirOrder) {
  const std::vector<TimedRun> close{{"a", 1.00, 1.10}, {"b", 1.04, 1.00}};
  EXPECT_TRUE(misordered_pairs(close, 0.05).empty());
  const std::vector<TimedRun> apart{{"a", 1.00, 1.10}, {"b", 1.20, 1.00}, {"c", 2.0, 3.0}};
  EXPECT_EQ(misordered_pairs(apart, 0.05), (std::vector<std::pair<std::string, std::string>>{{"a", "b"}}));
  EXPECT_EQ(misordered_pairs(close, 0.0), (std::vector<std::pair<std::string, std::string>>{{"a", "b"}}));
}

}  // namespace
}  // namespace hetpar
