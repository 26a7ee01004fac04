// The memory model against hand counts: state is 16 bytes a trainable
// parameter split by TP and PP, activations scale with the micro-batches a
// schedule holds in flight (1F1B's pp - stage, non-colocated run-ahead,
// colocated whole_step holding every micro-batch's encoder work).
#include <gtest/gtest.h>

#include "metrics/model_flops.hpp"
#include "parallel/rank_parts.hpp"
#include "plan/memory_model.hpp"
#include "tests/plan_fixtures.hpp"

namespace hetpar {
namespace {

RunConfig tiny(const std::vector<std::string>& sets) { return planning_run(sets); }

TEST(MemoryModel, OneRankHoldsEveryParameterSixteenTimes) {
  const RunConfig c = tiny({});
  const std::vector<RankMemory> ranks = rank_memory(c, MemoryAssumptions{4, 1000});
  ASSERT_EQ(ranks.size(), 1u);
  const double parameters = double(llm_parameters(c.llm) + encoder_parameters(c.encoder) +
                                   projector_parameters(c.encoder, c.llm));
  EXPECT_NEAR(ranks[0].state, 16 * parameters, 1e-9 * parameters);
  EXPECT_EQ(ranks[0].reserved, 1000);
  EXPECT_EQ(ranks[0].micro_batches_in_flight, 1);
  // The one-rank loss holds 3 fp32 values per token and vocabulary entry.
  EXPECT_DOUBLE_EQ(ranks[0].transient, 3.0 * 4 * 128 * 512);
  EXPECT_DOUBLE_EQ(all_ranks_bytes(ranks), ranks[0].total());
}

TEST(MemoryModel, TensorParallelismSplitsTheStateAndBf16HalvesActivationsAndCopiesTheWeights) {
  const RankMemory one = rank_memory(tiny({}), MemoryAssumptions{4, 0})[0];
  const RankMemory tp2 = rank_memory(tiny({"layout.llm.tp=2"}), MemoryAssumptions{4, 0})[0];
  EXPECT_NEAR(tp2.state, one.state / 2, 1e-9 * one.state);  // uniform: the encoder takes tp 2 too
  EXPECT_LT(tp2.activations, one.activations);
  // Over TP the vocab-parallel loss holds 4 copies of half the vocabulary.
  EXPECT_DOUBLE_EQ(tp2.transient, 4.0 * 4 * 128 * 512 / 2);
  const RankMemory bf16 = rank_memory(tiny({}), MemoryAssumptions{2, 0})[0];
  // bf16 halves every saved activation but the fp32 ones: the norms' inputs
  // (the residual stream, two a layer, of the module's hidden size) and the
  // floats a row (each norm's scale, and mean in a layer norm; the
  // attention's log-sum-exp a head), the LLM's final norm's too.
  const RunConfig c = tiny({});
  const double sequence = double(c.data.micro_batch_size * c.llm.seq_len);
  const double tokens = sequence * double(c.llm.layers);
  const double patches = double(c.data.micro_batch_size * c.data.images_max * c.encoder.patches_per_image()) *
                         double(c.encoder.layers);
  const double fp32 = 4.0 * (tokens * double(2 * c.llm.hidden + 2 + c.llm.heads) +
                             patches * double(2 * c.encoder.hidden + 4 + c.encoder.heads) +
                             sequence * double(c.llm.hidden + 1));
  EXPECT_DOUBLE_EQ(bf16.activations, (one.activations - fp32) / 2 + fp32);
  // Over TP in bf16 the loss also holds the head's bf16 logits beside its fp32 copy.
  const RankMemory tp2_bf16 = rank_memory(tiny({"layout.llm.tp=2"}), MemoryAssumptions{2, 0})[0];
  EXPECT_DOUBLE_EQ(tp2_bf16.transient, 4.5 * 4 * 128 * 512 / 2);
  // fp32 weights, gradients, moments on every precision; in bf16 also the
  // step's 2-byte copies of every trainable weight but the embedding table.
  const double parameters = double(llm_parameters(c.llm) + encoder_parameters(c.encoder) +
                                   projector_parameters(c.encoder, c.llm));
  const double embedding_table = double(c.llm.vocab_size * c.llm.hidden);
  EXPECT_NEAR(bf16.state, one.state + 2 * (parameters - embedding_table), 1e-9 * one.state);
}

// Sequence parallelism splits what the norms save of the residual stream
// (their fp32 inputs and a float a row: two a layer and the final norm's)
// and the parts of their outputs the matmuls keep over TP; the encoder keeps
// whole sequences.
TEST(MemoryModel, SequenceParallelismSplitsTheNormsInputsAndOutputsOverTp) {
  for (double element_bytes : {4.0, 2.0}) {
    const RunConfig c = tiny({"layout.llm.tp=2"});
    const RankMemory tp2 = rank_memory(c, MemoryAssumptions{element_bytes, 0})[0];
    const RankMemory sp = rank_memory(tiny({"layout.llm.tp=2", "layout.llm.sp=true"}), MemoryAssumptions{element_bytes, 0})[0];
    const double sequence = double(c.data.micro_batch_size * c.llm.seq_len);
    const double norms = (4.0 * double(c.llm.hidden + 1) + element_bytes * double(c.llm.hidden)) * sequence *
                         double(2 * c.llm.layers + 1);
    EXPECT_DOUBLE_EQ(tp2.activations - sp.activations, norms / 2) << element_bytes;
    EXPECT_DOUBLE_EQ(tp2.state, sp.state);
  }
}

TEST(MemoryModel, UnfusedGroupedQueryAttentionKeepsItsProbabilities) {
  const RunConfig c = tiny({});  // 4 query heads over 2 kv heads, 128 tokens, 4 layers, micro-batch 1
  const RankMemory fused = rank_memory(c, MemoryAssumptions{4, 0, false})[0];
  const RankMemory unfused = rank_memory(c, MemoryAssumptions{4, 0, true})[0];
  EXPECT_DOUBLE_EQ(unfused.activations - fused.activations, 4.0 * 128 * 4 * (4 * 128));  // bytes x tokens x layers x (heads x keys)
  // Without grouped-query heads the fused kernel runs: nothing more is kept.
  const RunConfig mha = tiny({"llm.kv_heads=4"});
  EXPECT_DOUBLE_EQ(rank_memory(mha, MemoryAssumptions{4, 0, true})[0].activations,
                   rank_memory(mha, MemoryAssumptions{4, 0, false})[0].activations);
}

// Past the loss, the backward's fullest moments (memory_model.cpp,
// backward_transient), by hand for 128 tokens of hidden 64 and a small
// vocabulary so that none of them is the logits'.
TEST(MemoryModel, TheBackwardHoldsTheTopMlpsGradientsTheSpHeadsGatherAndTheCpuNormsCopies) {
  const double t = 128, h = 64, v = 64;
  const double final_norm = t * (4 * h + 4 + 4 * h), final_norm_bf16 = t * (4 * h + 4 + 2 * h);
  // The top MLP's hidden gradients (two fp32 values a unit; three bf16 ones,
  // with the input's gradient and a weight's), the residual's gradient, less
  // the final norm's kept input and output.
  const double f = 1024;
  const RunConfig wide = tiny({"llm.vocab_size=64", "llm.ffn_hidden=1024"});
  EXPECT_DOUBLE_EQ(rank_memory(wide, MemoryAssumptions{4, 0})[0].transient,
                   2 * t * f * 4 + t * h * 4 - final_norm);
  EXPECT_DOUBLE_EQ(rank_memory(wide, MemoryAssumptions{2, 0})[0].transient,
                   3 * t * f * 2 + t * h * 2 + h * f * 2 + t * h * 4 - final_norm_bf16);
  // Where the GEMM adds into the fp32 .grad itself, no weight's bf16 gradient.
  MemoryAssumptions into_fp32{2, 0};
  into_fp32.gemm_adds_into_fp32 = true;
  EXPECT_DOUBLE_EQ(rank_memory(wide, into_fp32)[0].transient, 3 * t * f * 2 + t * h * 2 + t * h * 4 - final_norm_bf16);
  // Over TP 2 with a narrow MLP the loss's four copies lead, unless the
  // norm's backward runs unfused (three fp32 values a token and unit).
  const RunConfig tp2 = tiny({"llm.vocab_size=64", "layout.llm.tp=2"});
  MemoryAssumptions cpu{4, 0};
  EXPECT_DOUBLE_EQ(rank_memory(tp2, cpu)[0].transient, 4 * t * v / 2 * 4);
  cpu.norm_backward_unfused = true;
  EXPECT_DOUBLE_EQ(rank_memory(tp2, cpu)[0].transient, 3 * t * h * 4);
  // Under SP the head's backward: the input's gradient and the input gathered
  // again over the whole sequence, two parts, the weight's gradient; and a
  // copy of the gradient where the reduce-scatter copies its input.
  const RunConfig sp = tiny({"llm.vocab_size=64", "layout.llm.tp=2", "layout.llm.sp=true"});
  const double head = 2 * t * h * 4 + 2 * t * h * 4 / 2 + v / 2 * h * 4;
  EXPECT_DOUBLE_EQ(rank_memory(sp, MemoryAssumptions{4, 0})[0].transient, head);
  cpu.reduce_scatter_copies_input = true;
  EXPECT_DOUBLE_EQ(rank_memory(sp, cpu)[0].transient, head + t * h * 4);
}

// A module whose every micro-batch of the step is in flight at once runs
// all its forwards before its first backward, and the step's gradients are
// dropped after it: its activations' peak comes with no gradient.
TEST(MemoryModel, WithEveryForwardFirstNoGradientIsMadeAtThePeak) {
  const RunConfig one = tiny({"data.global_batch_size=1"});  // one micro-batch a step
  const RankMemory r = rank_memory(one, MemoryAssumptions{4, 0})[0];
  const double trainable = double(llm_parameters(one.llm) + encoder_parameters(one.encoder) +
                                  projector_parameters(one.encoder, one.llm));
  EXPECT_NEAR(r.unmade_gradients, 4 * trainable, 1e-9 * trainable);
  EXPECT_DOUBLE_EQ(r.total(), r.state - r.unmade_gradients + r.activations + r.transient);
  // Sharded, the kept share of the sum stays between steps: the same 4 bytes a parameter are unmade.
  const RankMemory sharded =
      rank_memory(tiny({"data.global_batch_size=2", "layout.llm.dp=2", "optim.shard_state=true"}), MemoryAssumptions{4, 0})[0];
  EXPECT_NEAR(sharded.unmade_gradients, 4 * trainable, 1e-9 * trainable);
  // Two micro-batches on one rank: the second's forward follows the first's backward.
  EXPECT_EQ(rank_memory(tiny({"data.global_batch_size=2"}), MemoryAssumptions{4, 0})[0].unmade_gradients, 0);
  // 1F1B over 4 stages and 4 micro-batches: the first stage holds all four, the second three.
  const std::vector<RankMemory> pp4 = rank_memory(tiny({"layout.llm.pp=4", "data.global_batch_size=4"}), MemoryAssumptions{4, 0});
  EXPECT_GT(pp4[0].unmade_gradients, 0);
  EXPECT_EQ(pp4[1].unmade_gradients, 0);
  // Where the gradients outweigh the activations, the optimizer's moment (the whole state) is the peak.
  RankMemory light;
  light.state = 100, light.unmade_gradients = 40, light.activations = 10, light.transient = 5, light.reserved = 1;
  EXPECT_DOUBLE_EQ(light.total(), 101);
}

TEST(MemoryModel, OneFOneBHoldsPpMinusStageMicroBatches) {
  const std::vector<RankMemory> ranks = rank_memory(tiny({"layout.llm.pp=4"}), MemoryAssumptions{4, 0});
  ASSERT_EQ(ranks.size(), 4u);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(ranks[s].micro_batches_in_flight, 4 - s) << s;
  EXPECT_EQ(ranks[0].what, "encoder stage 0 + llm stage 0");
  EXPECT_EQ(ranks[1].what, "llm stage 1");
  // Equal layers per stage: a middle stage's activations are its micro-batches' share.
  EXPECT_DOUBLE_EQ(ranks[1].activations / 3, ranks[2].activations / 2);
  // The last stage's transient is the loss's (3 copies of the logits); a
  // stage before it holds its top MLP's gradients and the gradient it received.
  EXPECT_DOUBLE_EQ(ranks[3].transient, 3.0 * 4 * 128 * 512);
  EXPECT_DOUBLE_EQ(ranks[0].transient, 2.0 * 128 * 192 * 4 + 128.0 * 64 * 4);
}

TEST(MemoryModel, TheScheduleSetsHowManyMicroBatchesOfEncoderWorkWait) {
  const auto encoder_activations = [](std::vector<std::string> sets) {
    return rank_memory(tiny(sets), MemoryAssumptions{4, 0})[0];
  };
  const std::vector<std::string> coloc = {"layout.placement=\"colocated\"", "layout.llm.pp=2", "layout.encoder.dp=2"};
  auto whole = coloc, fill = coloc;
  whole.push_back("layout.encoder_schedule=\"whole_step\"");
  fill.push_back("layout.encoder_in_flight=3");
  EXPECT_EQ(encoder_activations(whole).micro_batches_in_flight, 8);  // every micro-batch encoded first
  EXPECT_EQ(encoder_activations(fill).micro_batches_in_flight, 3);
  EXPECT_GT(encoder_activations(whole).activations, encoder_activations(fill).activations);
  // Non-colocated: the encoder holds run_ahead micro-batches.
  const std::vector<RankMemory> apart = rank_memory(
      tiny({"layout.placement=\"non-colocated\"", "layout.encoder.dp=1", "layout.run_ahead=3"}), MemoryAssumptions{4, 0});
  ASSERT_EQ(apart.size(), 2u);
  EXPECT_EQ(apart[0].what, "encoder stage 0");
  EXPECT_EQ(apart[0].micro_batches_in_flight, 3);
  EXPECT_EQ(apart[1].micro_batches_in_flight, 1);
  EXPECT_GT(apart[1].state, apart[0].state);  // the LLM holds more parameters than the encoder here
}

// Where a stage's every forward comes first and the step has more than one
// micro-batch, its last backward runs with every gradient made by the ones
// before it and one micro-batch's activations left: recomputing, with few
// activations kept, the peak comes there.
TEST(MemoryModel, TheLastBackwardHoldsEveryGradient) {
  const std::vector<RankMemory> pp2 =
      rank_memory(tiny({"layout.llm.pp=2", "data.global_batch_size=2", "run.recompute=\"full\""}), MemoryAssumptions{4, 0});
  const RankMemory& first = pp2[0];
  ASSERT_EQ(first.micro_batches_in_flight, 2);
  ASSERT_GT(first.unmade_gradients, 0);
  EXPECT_GE(first.total(), first.state + first.activations / 2);
  // Its bottom layer's work made again, beside every gradient, outweighs the other micro-batch's inputs, freed.
  EXPECT_GT(first.transient, first.unmade_gradients);
}

// A non-colocated encoder's last stage keeps each micro-batch's rows and
// their send copy (two LLM-wide rows a token), and its backward holds the
// received gradient's buffer and rows, or the gradient, its input's and
// the projector's output weight's new gradient (fp32, after its bf16 one);
// then its top layer's MLP backward the residual's gradient and its hidden
// values' (one in fp32, two in bf16), the projector's rows and the send
// copy freed.
TEST(MemoryModel, TheNonColocatedEncoderHoldsItsRowsAndTheirGradient) {
  const RunConfig c = tiny({"layout.placement=\"non-colocated\"", "layout.encoder.dp=1", "layout.run_ahead=1"});
  const double images = 3, tokens = images * 16;  // a sample at 3 images of 16 patches, each a row
  const double rows = tokens * 64;                 // at the LLM's hidden
  const double weight = 64.0 * 64;
  const auto mlp = [&](double b) {
    const double freed = tokens * (64 + 2 * 64) * b + rows * b;  // the projector's input, hidden and activation; the send copy
    return tokens * 64 * 4 + tokens * 256 * b * (b < 4 ? 2 : 1) - freed;
  };
  EXPECT_DOUBLE_EQ(rank_memory(c, MemoryAssumptions{4, 0})[0].transient,
                   std::max({2 * rows * 4, rows * 4 + weight * 4, mlp(4)}));
  EXPECT_DOUBLE_EQ(rank_memory(c, MemoryAssumptions{2, 0})[0].transient,
                   std::max({2 * rows * 2, rows * 2 + weight * 2 + weight * 4, mlp(2)}));
  EXPECT_GT(mlp(2), rows * 2 + weight * 2 + weight * 4);  // bf16: the MLP's moment leads here
  // Where the GEMM adds into the fp32 .grad itself the weight has no bf16 gradient.
  MemoryAssumptions into_fp32{2, 0};
  into_fp32.gemm_adds_into_fp32 = true;
  const RunConfig rows_lead = tiny({"layout.placement=\"non-colocated\"", "layout.encoder.dp=1", "layout.run_ahead=1",
                                    "encoder.mlp_hidden=16"});
  const double narrow_mlp = tokens * 64 * 4 + tokens * 16 * 2 * 2 - (tokens * (64 + 2 * 64) * 2 + rows * 2);
  EXPECT_DOUBLE_EQ(rank_memory(rows_lead, into_fp32)[0].transient,
                   std::max({2 * rows * 2, rows * 2 + weight * 4, narrow_mlp}));
  EXPECT_DOUBLE_EQ(rank_memory(rows_lead, MemoryAssumptions{2, 0})[0].transient,
                   std::max({2 * rows * 2, rows * 2 + weight * 2 + weight * 4, narrow_mlp}));
}

// The model's entries are the trainer's parts (parallel/rank_parts.hpp), in
// the same order, with as many ranks: each kind of rank's measured peak
// (steps.jsonl's peak_tensor_mib_by_part) meets its prediction by name.
TEST(MemoryModel, HasOneEntryForEachPartOfTheRanks) {
  const std::vector<std::vector<std::string>> layouts = {
      {},
      {"layout.llm.pp=2", "layout.llm.dp=2"},
      {"layout.placement=\"colocated\"", "layout.llm.pp=2", "layout.encoder.dp=2"},
      {"layout.placement=\"non-colocated\"", "layout.encoder.pp=2", "layout.encoder.tp=2", "layout.llm.pp=2"},
      {"layout.placement=\"non-colocated\"", "layout.encoder.dp=3", "layout.llm.tp=2"}};
  for (const std::vector<std::string>& sets : layouts) {
    const RunConfig c = tiny(sets);
    const std::vector<RankMemory> ranks = rank_memory(c, MemoryAssumptions{4, 0});
    const std::vector<RankPart> parts = rank_parts(c.placement);
    ASSERT_EQ(ranks.size(), parts.size()) << ::testing::PrintToString(sets);
    int covered = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(ranks[i].what, parts[i].what) << ::testing::PrintToString(sets);
      EXPECT_EQ(ranks[i].ranks, int(parts[i].ranks.size())) << parts[i].what;
      covered += int(parts[i].ranks.size());
    }
    EXPECT_EQ(covered, c.placement.world_size) << ::testing::PrintToString(sets);
  }
}

}  // namespace
}  // namespace hetpar
