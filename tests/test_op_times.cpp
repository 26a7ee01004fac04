// The step-time model's op half against hand computations: a GEMM's time
// from the nearest measured rate, a collective's from latency + bandwidth, a
// layer stack's forward as its matmul FLOPs over the rate, and more ranks
// than cores taking the cores' time for everyone's compute.
#include <gtest/gtest.h>

#include <fstream>

#include "config/run_config.hpp"
#include "metrics/prediction_order.hpp"
#include "plan/memory_model.hpp"
#include "plan/op_times.hpp"
#include "plan/profile.hpp"
#include "tests/plan_fixtures.hpp"
#include "tests/test_paths.hpp"

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

TEST(Profile, ABackwardTakesItsTwoGemmsAtTheBackwardRate) {
  json j = flat_profile(1e9, 2);
  const Profile published = Profile::from_json(j, "test");  // one rate stated: the backward runs at it
  EXPECT_DOUBLE_EQ(published.gemm_backward_seconds(64, 64, 64), 4.0 * 64 * 64 * 64 / 1e9);
  j["gemm"][0]["backward_flops_per_second"] = 5e8;
  const Profile measured = Profile::from_json(j, "test");
  EXPECT_DOUBLE_EQ(measured.gemm_seconds(64, 64, 64), 2.0 * 64 * 64 * 64 / 1e9);
  EXPECT_DOUBLE_EQ(measured.gemm_backward_seconds(64, 64, 64), 4.0 * 64 * 64 * 64 / 5e8);
  j["gemm"][0]["backward_flops_per_second"] = 0;
  EXPECT_THROW(Profile::from_json(j, "test"), std::runtime_error);
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

// What the device's kernels and backend hold at once, for the memory model:
// absent (a published profile) means fused kernels and no copies.
TEST(Profile, StatesWhatTheDevicesBackwardHoldsForTheMemoryModel) {
  json j = flat_profile(1e9, 2);
  const Profile published = Profile::from_json(j, "test");
  EXPECT_FALSE(published.norm_backward_unfused());
  EXPECT_FALSE(published.reduce_scatter_copies_input());
  j["norm_backward_unfused"] = true;
  j["reduce_scatter_copies_input"] = true;
  const Profile cpu = Profile::from_json(j, "test");
  EXPECT_TRUE(cpu.norm_backward_unfused());
  EXPECT_TRUE(cpu.reduce_scatter_copies_input());
  const MemoryAssumptions assumed = memory_assumptions(cpu);  // what the planner and sweeps pass on
  EXPECT_TRUE(assumed.norm_backward_unfused);
  EXPECT_TRUE(assumed.reduce_scatter_copies_input);
  EXPECT_FALSE(assumed.gemm_adds_into_fp32);
  j["gemm_adds_into_fp32"] = true;
  EXPECT_TRUE(memory_assumptions(Profile::from_json(j, "test")).gemm_adds_into_fp32);
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
  json not_a_flag = flat_profile(1e9, 2);
  not_a_flag["norm_backward_unfused"] = "yes";
  refused(not_a_flag, "p.json: \"norm_backward_unfused\" must be true or false");
  // A field of the wrong type is named (not a JSON library's message naming nothing).
  json causal_text = flat_profile(1e9, 2);
  causal_text["attention"][0]["causal"] = "yes";
  refused(causal_text, "p.json: attention entry: \"causal\" must be true or false, got \"yes\"");
  json measured_text = flat_profile(1e9, 2);
  measured_text["measured"] = "x";
  refused(measured_text, "p.json: \"measured\" must be an object or array, got \"x\"");
  json op_number = flat_profile(1e9, 2);
  op_number["collectives"][0]["op"] = 7;
  refused(op_number, "collective entry: \"op\" must be a string, got 7");
  json one_rank = flat_profile(1e9, 2);
  one_rank["collectives"][0]["group_size"] = 1;
  refused(one_rank, "\"group_size\" must be 2 or more");
  // Rates and times no device measures (a unit slip): an infinite op cost once deadlocked the pipeline replay.
  refused(flat_profile(1e-300, 2), "\"flops_per_second\" must be at least 1000 a second, got 1e-300");
  json slow_link = flat_profile(1e9, 2);
  slow_link["collectives"][0]["latency_seconds"] = 1e308;
  refused(slow_link, "\"latency_seconds\" must be at most 3600 seconds, got 1e+308");
  json half_node = flat_profile(1e9, 2);
  half_node["gpus_per_node"] = 0.5;  // read as 0 it meant "every rank on one node"
  refused(half_node, "p.json: \"gpus_per_node\" must be a whole number from 0 to 1000000, got 0.5");
  json no_cores = flat_profile(1e9, 2);
  no_cores["measured"]["cores"] = -2;
  refused(no_cores, "p.json: measured: \"cores\" must be a whole number from 0 to 1000000, got -2");
  try {
    Profile::load(::testing::TempDir());
    ADD_FAILURE() << "a directory was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a directory, not a profile file"), std::string::npos) << e.what();
  }
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
  const RunConfig c = load_run_config(source_tree_path("/workloads/tiny.toml"), {});
  const OpTimes t = op_times(c, Profile::from_json(flat_profile(1e9, 2), "flat"));
  const double flops = 256.0 * (2 * 98304 + 2 * 64 * 512);
  ASSERT_EQ(t.llm_forward.size(), 1u);
  EXPECT_NEAR(t.llm_forward[0], flops / 1e9, 1e-6 * flops / 1e9);
  EXPECT_NEAR(t.llm_backward[0], 2 * flops / 1e9, 1e-6 * flops / 1e9);
  // Under TP2 each rank does half the matmuls.
  const RunConfig tp2 = load_run_config(source_tree_path("/workloads/tiny.toml"), {"layout.llm.tp=2"});
  EXPECT_NEAR(op_times(tp2, Profile::from_json(flat_profile(1e9, 2), "flat")).llm_forward[0], flops / 2e9, 1e-6 * flops / 1e9);
}

// The same LLM with free matmuls and only "add"-kind ops priced (1e9 B/s):
// per token and layer the two residual adds (3 x 64 values each), the
// attention output's copy (2 x 64), the SwiGLU product (3 x 192) and RoPE on
// q and k (5 x (64 + 32)) forward, all but RoPE twice over backward; per
// layer and micro-batch the fused weights concatenated forward (2 x 4 bytes
// of 64 x 128 + 2 x 64 x 192 = 32768 values) and all 49152 weights'
// gradients accumulated backward (3 x 4 bytes each); the fp32 loss over the
// 512 logits a token (9.5 passes forward, 5.5 backward), the head's
// gradient accumulated (32768 values), and the embedding's: each
// micro-batch's 256 rows of 64 added into .grad (3 x 4 bytes each) and its
// 32768 zeros filled once a step (4 bytes, a quarter on each of the 4
// micro-batches). Under TP2 each rank's share, plus the copies of four
// all-reduce inputs (2 x 64 each).
TEST(OpTimes, TheLlmElementwiseWorkIsTheLayerCodesOps) {
  json j = flat_profile(1e30, 2);
  for (json& m : j["memory_bound"]) {
    if (m["op"] == "add") m["bytes_per_second"] = 1e9;
  }
  const Profile p = Profile::from_json(j, "adds only");
  const double tokens = 256, bytes = 4;
  const double layer_forward = 2 * 3 * 64 + 3 * 192 + 5 * 96, rope = 5 * 96;
  // The loss's passes over the logits at fp32 width: on one rank the
  // library's log-softmax (4 forward, 5 backward), over TP the vocab-parallel
  // function (8 forward, 4 backward).
  const double logits = 4 * tokens * 512, loss_forward = 4 * logits, loss_backward = 5 * logits;
  const double table = 512 * 64;  // the head's weights, and the embedding's
  const double embedding_grad = 4 * table / 4 + 12 * tokens * 64;
  const OpTimes t = op_times(load_run_config(source_tree_path("/workloads/tiny.toml"), {}), p);
  // fp32: q, k, v and gate, up as separate GEMMs, their three input gradients summed backward.
  const double input_gradient_sums = 3 * 3 * 64;
  EXPECT_NEAR(t.llm_forward[0], (2 * tokens * bytes * layer_forward + loss_forward) / 1e9, 1e-10);
  EXPECT_NEAR(t.llm_backward[0],
              (2 * (tokens * bytes * (2 * layer_forward - rope + input_gradient_sums) + 12 * 49152) + loss_backward +
               12 * table + embedding_grad) / 1e9,
              1e-10);
  const OpTimes tp2 = op_times(load_run_config(source_tree_path("/workloads/tiny.toml"), {"layout.llm.tp=2"}), p);
  const double shard_forward = 2 * 3 * 64 + (3 * 192 + 5 * 96) / 2.0 + 2 * 2 * 64;
  EXPECT_NEAR(tp2.llm_forward[0], (2 * tokens * bytes * shard_forward + 8 * logits / 2) / 1e9, 1e-10);
  // Sequence parallel: the residual adds on half the tokens, no all-reduce
  // input copies, but two sequences a micro-batch: each of the four
  // collectives' inputs and outputs moved sequence first (a whole 64 and a
  // part of 32 values, read and written).
  const OpTimes sp = op_times(
      load_run_config(source_tree_path("/workloads/tiny.toml"), {"layout.llm.tp=2", "layout.llm.sp=true"}), p);
  const double split_forward = 2 * 3 * 64 / 2.0 + (3 * 192 + 5 * 96) / 2.0 + 4 * 2 * (64 + 32);
  EXPECT_NEAR(sp.llm_forward[0], (2 * tokens * bytes * split_forward + 8 * logits / 2) / 1e9, 1e-10);

  // bf16: values of 2 bytes but the residual stream's, whose two adds stay
  // fp32 (4 bytes; 2 with run.fp32_residual = false); q, k, v and gate, up
  // as one GEMM each on the step's concatenated copy; every weight cast to
  // bf16 once a step (6 bytes, a quarter of it on each of the 4
  // micro-batches); every micro-batch's bf16 weight gradients added into the
  // fp32 .grad (10 bytes); the embedding's fp32 gradient as in fp32; the
  // loss's logits cast in and back (1.5 passes each); V copied out of the
  // fused projection (read and written: 2 x 32 values a token).
  j["element_bytes"] = 2;
  const double v_copy = 2 * 32, residual_adds = 2 * 3 * 64;
  const RunConfig c = load_run_config(source_tree_path("/workloads/tiny.toml"), {});
  ASSERT_EQ(micro_batches_per_step(c), 4);
  const OpTimes bf16 = op_times(c, Profile::from_json(j, "bf16 adds only"));
  const double rest_forward = layer_forward - residual_adds, rest_backward = 2 * layer_forward - rope - 2 * residual_adds;
  for (const double residual_bytes : {4.0, 2.0}) {
    const RunConfig run =
        residual_bytes == 4 ? c : load_run_config(source_tree_path("/workloads/tiny.toml"), {"run.fp32_residual=false"});
    const OpTimes t16 = op_times(run, Profile::from_json(j, "bf16 adds only"));
    EXPECT_NEAR(t16.llm_forward[0],
                (2 * (tokens * (2 * (rest_forward + v_copy) + residual_bytes * residual_adds) + 6 * 49152 / 4.0) +
                 5.5 * logits + 6 * table / 4.0) / 1e9,
                1e-10) << residual_bytes;
    EXPECT_NEAR(t16.llm_backward[0],
                (2 * (tokens * (2 * rest_backward + residual_bytes * 2 * residual_adds) + 10 * 49152) + 6.5 * logits +
                 10 * table + embedding_grad) / 1e9,
                1e-10) << residual_bytes;
  }
  // Where the GEMM adds into the fp32 .grad itself: no add, but the GEMM reads
  // and writes 4 bytes a weight instead of writing 2 (6 bytes, not 10).
  j["gemm_adds_into_fp32"] = true;
  const OpTimes into_fp32 = op_times(c, Profile::from_json(j, "bf16 adds only, fp32 GEMM sums"));
  EXPECT_NEAR(into_fp32.llm_forward[0], bf16.llm_forward[0], 1e-12);
  EXPECT_NEAR(into_fp32.llm_backward[0],
              (2 * (tokens * (2 * rest_backward + 4 * 2 * residual_adds) + 6 * 49152) + 6.5 * logits + 6 * table +
               embedding_grad) / 1e9,
              1e-10);
}

// A profile prices one precision: a run in the other is refused (the plan
// exits, a sweep's run gets no prediction), "auto" takes the profile's.
TEST(OpTimes, AProfileOfAnotherPrecisionIsRefused) {
  json j = flat_profile(1e9, 2);
  const Profile cpu = Profile::from_json(j, "fp32");
  j["element_bytes"] = 2;
  const Profile gpu = Profile::from_json(j, "bf16");
  const auto run = [](const char* precision) {
    return load_run_config(source_tree_path("/workloads/tiny.toml"), {std::string("run.precision=\"") + precision + "\""});
  };
  EXPECT_EQ(precision_problem(run("auto"), cpu), "");
  EXPECT_EQ(precision_problem(run("auto"), gpu), "");
  EXPECT_EQ(precision_problem(run("fp32"), cpu), "");
  EXPECT_EQ(precision_problem(run("bf16"), gpu), "");
  EXPECT_NE(precision_problem(run("bf16"), cpu).find("run.precision = \"bf16\", but the profile measures fp32"),
            std::string::npos);
  EXPECT_NE(precision_problem(run("fp32"), gpu).find("run.precision = \"fp32\", but the profile measures bf16"),
            std::string::npos);
}

// The residual stream's width in bf16 (a profile of 2-byte activations):
// fp32 unless run.fp32_residual = false. With everything but the
// collectives free (1 GB/s, no latency), a pipeline stage's send is the
// stream's bytes, and a TP2 layer's backward all-reduces its two input
// gradients at that width while its forward's two all-reduce the GEMMs'
// bf16 outputs.
TEST(OpTimes, TheResidualStreamsWidthPricesStageSendsAndTpInputGradients) {
  json j = flat_profile(1e30, 2);
  j["element_bytes"] = 2;
  for (json& c : j["collectives"]) c["bytes_per_second"] = 1e9;
  const Profile p = Profile::from_json(j, "collectives only");
  for (const double width : {4.0, 2.0}) {
    std::vector<std::string> stream;
    if (width == 2) stream.push_back("run.fp32_residual=false");
    std::vector<std::string> pp2 = stream, tp2 = stream;
    pp2.push_back("layout.llm.pp=2");
    tp2.push_back("layout.llm.tp=2");
    const RunConfig piped = load_run_config(source_tree_path("/workloads/tiny.toml"), pp2);
    const double tokens = double(piped.data.micro_batch_size * piped.llm.seq_len), h = double(piped.llm.hidden);
    EXPECT_NEAR(op_times(piped, p).stage_transfer, width * tokens * h / 1e9, 1e-15) << width;
    const RunConfig split = load_run_config(source_tree_path("/workloads/tiny.toml"), tp2);
    const OpTimes t = op_times(split, p);
    const double layers = double(split.llm.layers), head = 3 * 4 * tokens / 1e9;  // the loss's all-reduces
    EXPECT_NEAR(t.llm_forward[0], layers * 2 * 2 * tokens * h / 1e9 + head, 1e-9) << width;
    EXPECT_NEAR(t.llm_backward[0], layers * 2 * width * tokens * h / 1e9, 1e-9) << width;
  }
}

// Calibrated whole layers set the layer's compute: with GEMMs at 1 GFLOP/s
// and nothing else priced, the tiny LLM layer's primitives are its matmul
// FLOPs (98304 a token, 256 tokens: P = 25.2 ms forward, 2P backward). Two
// measured shapes (hidden 64 and 128) fit fixed + ratio x primitives; one
// shape gives the ratio alone.
TEST(OpTimes, CalibratedLayersSetALayersCompute) {
  json j = flat_profile(1e9, 2);
  const RunConfig c = load_run_config(source_tree_path("/workloads/tiny.toml"), {});
  const double layer = 256.0 * 98304 / 1e9, head = 256.0 * 2 * 64 * 512 / 1e9;
  // The same layer at hidden 128 (heads of 32, SwiGLU 384): 4x the FLOPs a token.
  const double wide = 256.0 * 2 * (128 * (128 + 2 * 64) + 128 * 128 + 3 * 128 * 384) / 1e9;
  const auto entry = [](double hidden, double mlp, double forward, double backward) {
    return json{{"module", "llm"}, {"sequences", 2}, {"seq", 128}, {"hidden", hidden}, {"heads", 4},
                {"kv_heads", 2}, {"mlp", mlp}, {"forward_seconds", forward}, {"backward_seconds", backward}};
  };
  // Measured: 2 ms + 1.5x the primitives forward, 3 ms + 1.25x backward.
  j["layers"] = {entry(64, 192, 2e-3 + 1.5 * layer, 3e-3 + 1.25 * 2 * layer),
                 entry(128, 384, 2e-3 + 1.5 * wide, 3e-3 + 1.25 * 2 * wide)};
  const OpTimes fitted = op_times(c, Profile::from_json(j, "two layers"));
  EXPECT_NEAR(fitted.llm_forward[0], 2 * (2e-3 + 1.5 * layer) + head, 1e-9);
  EXPECT_NEAR(fitted.llm_backward[0], 2 * (3e-3 + 1.25 * 2 * layer) + 2 * head, 1e-9);
  // TP2 halves the primitives, not the fixed part.
  const RunConfig tp2 = load_run_config(source_tree_path("/workloads/tiny.toml"), {"layout.llm.tp=2"});
  EXPECT_NEAR(op_times(tp2, Profile::from_json(j, "two layers")).llm_forward[0],
              2 * (2e-3 + 1.5 * layer / 2) + head / 2, 1e-9);
  j["layers"] = {entry(128, 384, 2 * wide, 3 * wide)};
  const OpTimes ratio = op_times(c, Profile::from_json(j, "one layer"));
  EXPECT_NEAR(ratio.llm_forward[0], 2 * 2 * layer + head, 1e-9);
  EXPECT_NEAR(ratio.llm_backward[0], 2 * 1.5 * 2 * layer + 2 * head, 1e-9);
  j["layers"][0]["module"] = "vision";
  EXPECT_THROW(Profile::from_json(j, "bad"), std::runtime_error);
}

TEST(OpTimes, ACollectiveWaitsForTheRanksDriftOverTheComputeBeforeIt) {
  // Free collectives; the ranks drift 0.2 s per second of compute beyond the
  // calibration's 1 ms in context.
  json j = flat_profile(1e9, 2);
  const Profile aligned = Profile::from_json(j, "no drift");
  j["collectives"][0]["skew_per_compute_second"] = 0.2;
  j["collectives"][0]["in_context_compute_seconds"] = 1e-3;
  const Profile drifting = Profile::from_json(j, "drift");
  EXPECT_NEAR(drifting.collective_skew_seconds(2, 6e-3), 0.2 * 5e-3, 1e-12);
  EXPECT_NEAR(drifting.collective_skew_seconds(4, 6e-3), 0.2 * 5e-3, 1e-12);  // the nearest group size measured
  EXPECT_EQ(drifting.collective_skew_seconds(1, 6e-3), 0);
  EXPECT_EQ(aligned.collective_skew_seconds(2, 6e-3), 0);
  // TP2: each layer's two all-reduces follow half its compute each way
  // (the layer's GEMMs at TP1 take `layer` forward, twice that backward).
  const RunConfig tp2 = load_run_config(source_tree_path("/workloads/tiny.toml"), {"layout.llm.tp=2"});
  const double layer = 256.0 * 98304 / 1e9;
  const OpTimes base = op_times(tp2, aligned), drift = op_times(tp2, drifting);
  EXPECT_NEAR(drift.llm_forward[0] - base.llm_forward[0], 2 * 2 * 0.2 * (layer / 2 / 2 - 1e-3), 1e-9);
  EXPECT_NEAR(drift.llm_backward[0] - base.llm_backward[0], 2 * 2 * 0.2 * (2 * layer / 2 / 2 - 1e-3), 1e-9);
  const RunConfig tp1 = load_run_config(source_tree_path("/workloads/tiny.toml"), {});
  EXPECT_EQ(op_times(tp1, drifting).llm_forward, op_times(tp1, aligned).llm_forward);  // no collective in a layer
  // Colocated without LLM TP: the forward's exchange after the encoder's
  // share, the backward's after the LLM's micro-batch.
  const RunConfig colocated = load_run_config(source_tree_path("/workloads/tiny.toml"),
                                              {"layout.placement=colocated", "layout.encoder.dp=2", "layout.llm.dp=2"});
  const OpTimes apart = op_times(colocated, drifting), together = op_times(colocated, aligned);
  EXPECT_NEAR(apart.boundary_forward - together.boundary_forward,
              0.2 * (together.encoder_forward[0] + together.encoder_backward[0] - 1e-3), 1e-9);
  EXPECT_NEAR(apart.boundary_backward - together.boundary_backward,
              0.2 * (together.llm_forward[0] + together.llm_backward[0] - 1e-3), 1e-9);
  j["collectives"][0].erase("in_context_compute_seconds");
  EXPECT_THROW(Profile::from_json(j, "bad"), std::runtime_error);
}

// With runtime.overlap_grad_reduce, on a device each module's last backward
// hides up to its length of the gradient sums (every bucket but the last
// starts during it); on shared CPU cores, and with one bucket, nothing hides.
TEST(OpTimes, TheLastBackwardHidesTheGradientSumsOnADevice) {
  json slow_sums = flat_profile(1e9, 2);
  slow_sums["collectives"][0]["bytes_per_second"] = 1e6;  // all_reduce: far longer than a backward
  const Profile cpu = Profile::from_json(slow_sums, "cpu");
  slow_sums["gpus_per_node"] = 8;
  const Profile device = Profile::from_json(slow_sums, "device");
  const std::vector<std::string> dp2 = {"layout.llm.dp=2", "data.micro_batch_size=1", "runtime.grad_bucket_mib=0.01"};
  const auto with = [&](std::vector<std::string> sets, const char* more) {
    sets.push_back(more);
    return load_run_config(source_tree_path("/workloads/tiny.toml"), sets);
  };
  const RunConfig on = with(dp2, "runtime.overlap_grad_reduce=true");
  const RunConfig off = with(dp2, "runtime.overlap_grad_reduce=false");
  const OpTimes device_on = op_times(on, device), device_off = op_times(off, device);
  ASSERT_GT(device_off.per_step, 10 * (device_off.llm_backward[0] + device_off.encoder_backward[0]));
  // Uniform: both modules over DP 2, each sum hiding behind its own last backward.
  EXPECT_NEAR(device_off.per_step - device_on.per_step, device_on.llm_backward[0] + device_on.encoder_backward[0],
              1e-9 * device_off.per_step);
  EXPECT_EQ(op_times(on, cpu).per_step, op_times(off, cpu).per_step);
  const RunConfig one_bucket_on = with({"layout.llm.dp=2", "data.micro_batch_size=1", "runtime.grad_bucket_mib=1024"},
                                       "runtime.overlap_grad_reduce=true");
  const RunConfig one_bucket_off = with({"layout.llm.dp=2", "data.micro_batch_size=1", "runtime.grad_bucket_mib=1024"},
                                        "runtime.overlap_grad_reduce=false");
  EXPECT_EQ(op_times(one_bucket_on, device).per_step, op_times(one_bucket_off, device).per_step);
}

// optim.shard_state over DP 2: AdamW updates half of each module's
// parameters (where the update is all there is, the step halves), and the
// sums become a reduce-scatter plus an all-gather (at one rate for all three,
// twice the all-reduce's time, none of it hidden with overlap off).
TEST(OpTimes, ShardedStateHalvesTheUpdateAndGathersAfterIt) {
  const std::vector<std::string> dp2 = {"layout.llm.dp=2", "data.micro_batch_size=1", "runtime.overlap_grad_reduce=false"};
  const auto with = [&](const char* more) {
    std::vector<std::string> sets = dp2;
    sets.push_back(more);
    return load_run_config(source_tree_path("/workloads/tiny.toml"), sets);
  };
  const RunConfig sharded = with("optim.shard_state=true"), whole = with("optim.shard_state=false");
  json slow_update = flat_profile(1e9, 0);
  for (json& m : slow_update["memory_bound"]) m["bytes_per_second"] = 1e6;
  const Profile update_bound = Profile::from_json(slow_update, "slow update");
  EXPECT_NEAR(op_times(sharded, update_bound).per_step, op_times(whole, update_bound).per_step / 2,
              1e-3 * op_times(whole, update_bound).per_step);
  json slow_sums = flat_profile(1e9, 0);
  for (json& c : slow_sums["collectives"]) c["bytes_per_second"] = 1e6;
  const Profile sum_bound = Profile::from_json(slow_sums, "slow sums");
  EXPECT_NEAR(op_times(sharded, sum_bound).per_step, 2 * op_times(whole, sum_bound).per_step,
              1e-3 * op_times(whole, sum_bound).per_step);
}

// Under uniform placement with CP every CP rank encodes its replica's images,
// so the encoder's gradients, like the LLM's, are summed over DP x CP: two CP
// ranks sum as much as two DP ranks.
TEST(OpTimes, UniformContextParallelismSumsTheEncodersGradientsToo) {
  const auto with = [](const char* layout) {
    return load_run_config(source_tree_path("/workloads/tiny.toml"),
                           {layout, "data.micro_batch_size=1", "runtime.overlap_grad_reduce=false"});
  };
  json slow_sums = flat_profile(1e9, 0);
  for (json& c : slow_sums["collectives"]) c["bytes_per_second"] = 1e6;
  const Profile sum_bound = Profile::from_json(slow_sums, "slow sums");
  const double cp2 = op_times(with("layout.llm.cp=2"), sum_bound).per_step;
  const double dp2 = op_times(with("layout.llm.dp=2"), sum_bound).per_step;
  EXPECT_NEAR(cp2, dp2, 1e-9 * dp2);
}

// Recompute runs each layer's forward again at the start of its backward:
// with a vocabulary too small for the head to count, the LLM's backward
// grows by its forward (TP collectives included), the encoder's by its
// blocks' share of it, and the forwards stay. Only each stage's first layer
// of two (run.recompute_layers = 1) adds half as much.
TEST(OpTimes, RecomputeAddsEachLayersForwardToItsBackward) {
  const auto with = [](const char* recompute, const char* layers = "run.recompute_layers=0") {
    return load_run_config(source_tree_path("/workloads/tiny.toml"),
                           {"layout.llm.tp=2", "llm.vocab_size=16", recompute, layers});
  };
  const Profile profile = Profile::from_json(flat_profile(1e9, 0), "flat");
  const OpTimes kept = op_times(with("run.recompute=\"none\""), profile);
  const OpTimes again = op_times(with("run.recompute=\"full\""), profile);
  EXPECT_EQ(again.llm_forward[0], kept.llm_forward[0]);
  EXPECT_NEAR(again.llm_backward[0] - kept.llm_backward[0], kept.llm_forward[0], 0.05 * kept.llm_forward[0]);
  EXPECT_EQ(again.encoder_forward[0], kept.encoder_forward[0]);
  // The encoder's forward also holds the patch embedding and the projector, which are not recomputed.
  EXPECT_LT(again.encoder_backward[0] - kept.encoder_backward[0], kept.encoder_forward[0]);
  EXPECT_GT(again.encoder_backward[0] - kept.encoder_backward[0], 0.5 * kept.encoder_forward[0]);
  const OpTimes first = op_times(with("run.recompute=\"full\"", "run.recompute_layers=1"), profile);
  EXPECT_EQ(first.llm_forward[0], kept.llm_forward[0]);
  EXPECT_NEAR(first.llm_backward[0] - kept.llm_backward[0], (again.llm_backward[0] - kept.llm_backward[0]) / 2,
              1e-9 * kept.llm_backward[0]);
  EXPECT_NEAR(first.encoder_backward[0] - kept.encoder_backward[0],
              (again.encoder_backward[0] - kept.encoder_backward[0]) / 2, 1e-9 * kept.encoder_backward[0]);
  // As many as a stage holds, or more, are all of them.
  EXPECT_EQ(op_times(with("run.recompute=\"full\"", "run.recompute_layers=5"), profile).llm_backward[0],
            again.llm_backward[0]);
  // run.recompute_modules: only the named module's layers run again.
  const OpTimes llm_only = op_times(with("run.recompute=\"full\"", "run.recompute_modules=\"llm\""), profile);
  EXPECT_EQ(llm_only.llm_backward[0], again.llm_backward[0]);
  EXPECT_EQ(llm_only.encoder_backward[0], kept.encoder_backward[0]);
  const OpTimes encoder_only = op_times(with("run.recompute=\"full\"", "run.recompute_modules=\"encoder\""), profile);
  EXPECT_EQ(encoder_only.llm_backward[0], kept.llm_backward[0]);
  EXPECT_EQ(encoder_only.encoder_backward[0], again.encoder_backward[0]);
}

TEST(OpTimes, MoreRanksThanCoresTakeTheCoresTimeForEveryonesCompute) {
  // DP4, every rank equally busy: on 4 cores the schedule's time, on 2 twice it.
  const RunConfig dp4 = load_run_config(source_tree_path("/workloads/tiny.toml"),
                                        {"layout.llm.dp=4", "data.micro_batch_size=1"});
  const Profile four = Profile::from_json(flat_profile(1e9, 4), "4 cores");
  const Profile two = Profile::from_json(flat_profile(1e9, 2), "2 cores");
  const double alone = predict_step_seconds(dp4, op_times(dp4, four));
  EXPECT_NEAR(predict_step_seconds(dp4, four), alone, 1e-9);
  EXPECT_NEAR(predict_step_seconds(dp4, two), 2 * alone, 1e-3 * alone);
  // Switching between ranks costs: at 80 % efficiency the cores take 1/0.8 as long.
  json slowed = flat_profile(1e9, 2);
  slowed["shared_cores"] = {{"efficiency", 0.8}};
  EXPECT_NEAR(predict_step_seconds(dp4, Profile::from_json(slowed, "2 cores at 80 %")), 2 * alone / 0.8,
              1e-3 * alone);
  EXPECT_NEAR(predict_step_seconds(dp4, Profile::from_json([&] {
                json four_slowed = flat_profile(1e9, 4);
                four_slowed["shared_cores"] = {{"efficiency", 0.8}};
                return four_slowed;
              }(), "4 cores")), alone, 1e-9);  // no core shared: no switching
  // The critical rank's ops too: four pipeline stages, the first with a
  // large encoder, wait for it rather than for the cores, and take 1/0.8 as
  // long at 80 %.
  const RunConfig pp4 = load_run_config(source_tree_path("/workloads/tiny.toml"),
                                        {"layout.llm.pp=4", "llm.layers=4", "encoder.hidden=256", "encoder.layers=8"});
  const StepPrediction whole = predict_step(pp4, two);
  ASSERT_EQ(whole.phases.core_wait, 0) << "the pipeline, not the cores, must set this step";
  EXPECT_NEAR(predict_step_seconds(pp4, Profile::from_json(slowed, "2 cores at 80 %")), whole.seconds / 0.8,
              1e-9 * whole.seconds);
  slowed["shared_cores"]["efficiency"] = 1.5;
  EXPECT_THROW(Profile::from_json(slowed, "bad"), std::runtime_error);
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
