// Sequence parallelism against the same computation on one rank (fp32,
// |a - b| <= 1e-6 + 1e-5 * max|b|): the sequence collectives, the TP
// layers with their activations split along the sequence (outputs, input,
// weight and bias gradients), attention with RoPE, and the whole LLM with
// image rows spliced in across the parts' edges (logits, loss, the rows' and
// every parameter's gradient), at TP 2 and 4 and at TP 2 x CP 2.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "model/attention.hpp"
#include "model/context_attention.hpp"
#include "model/llama.hpp"
#include "model/mlp.hpp"
#include "model/rope.hpp"
#include "tests/dist_harness.hpp"
#include "tests/sequence_split_fixtures.hpp"
#include "tp/parallel_linear.hpp"
#include "tp/sequence_split.hpp"
#include "train/sequence_part.hpp"

namespace hetpar::test {
namespace {

// This rank's contiguous part of dim 1 (the sequence).
at::Tensor mine(const at::Tensor& t, const Group& tp) { return shard(t, 1, tp.rank(), tp.size()); }

HETPAR_WORKER(sp_collectives) {
  Group& tp = rt.world();
  const at::Tensor x0 = data("x", {2, 8, 3}), r = data("r", {2, 8, 3});
  const double ranks_sum = tp.size() * (tp.size() + 1) / 2.0;
  // Without autograd: the parts gathered in rank order; every rank's whole summed, this rank's part kept.
  expect_close(all_gather_sequence(mine(x0, tp), tp), x0, "gathered sequence");
  expect_close(reduce_scatter_sequence(x0 * (tp.rank() + 1), tp), mine(x0, tp) * ranks_sum, "reduce-scattered part");
  // sum-scatter: every rank's partial sum, this rank's part of it; backward gathers.
  at::Tensor partial = leaf(x0 * (tp.rank() + 1));
  const at::Tensor summed = sum_scatter_sequence(partial, tp);
  expect_close(summed, mine(x0, tp) * ranks_sum, "summed part");
  (summed * mine(r, tp)).sum().backward();
  expect_close(partial.grad(), r, "sum-scatter's gradient");
  // A sequence that does not divide is named, not cut short.
  bool refused = false;
  try {
    sum_scatter_sequence(data("odd", {1, 8 * tp.size() + 1, 3}), tp);
  } catch (const std::invalid_argument& e) {
    refused = std::string(e.what()).find("does not divide") != std::string::npos;
  }
  require(refused, "an indivisible sequence was not refused");
}

// A column-parallel layer feeding a row-parallel one, both with biases, on a
// sequence split over the group: y = (x W1^T + b1) W2^T + b2.
HETPAR_WORKER(sp_linear_pair) {
  Group& tp = rt.world();
  const LinearSpec s1{.name = "sp_col", .in = 12, .out = 16, .seed = 42, .init_std = 0.2};
  const LinearSpec s2{.name = "sp_row", .in = 16, .out = 12, .seed = 42, .init_std = 0.2};
  ColumnParallelLinear col(s1, tp, false, TpSequence::kSplit);
  RowParallelLinear row(s2, tp, true, TpSequence::kSplit);
  const at::Tensor x0 = data("x", {3, 4 * tp.size(), 12}), r = data("r", {3, 4 * tp.size(), 12});
  at::Tensor x = leaf(mine(x0, tp)), xr = leaf(x0);
  at::Tensor w1 = leaf(full_linear_weight(s1)), b1 = leaf(full_linear_bias(s1));
  at::Tensor w2 = leaf(full_linear_weight(s2)), b2 = leaf(full_linear_bias(s2));
  const at::Tensor y = row.forward(col.forward(x));
  (y * mine(r, tp)).sum().backward();
  require(tp_partial_parameters(col).empty(), "a column-parallel layer's bias is sharded, not partial");
  require(sum_tp_partial_grads(row, tp) == 1, "the row-parallel bias is the one TP-partial parameter");
  const at::Tensor yr = at::linear(at::linear(xr, w1, b1), w2, b2);
  (yr * r).sum().backward();
  expect_close(y, mine(yr.detach(), tp), "output part");
  expect_close(x.grad(), mine(xr.grad(), tp), "input grad part");
  expect_close(col.weight.grad(), shard(w1.grad(), 0, tp.rank(), tp.size()), "column weight grad");
  expect_close(col.bias.grad(), shard(b1.grad(), 0, tp.rank(), tp.size()), "column bias grad");
  expect_close(row.weight.grad(), shard(w2.grad(), 1, tp.rank(), tp.size()), "row weight grad");
  expect_close(row.bias.grad(), b2.grad(), "row bias grad (replicated: summed over the group)");
  // Without sequence parallelism every rank's bias gradient is already the whole one.
  RowParallelLinear whole_row(s2, tp, true);
  require(tp_partial_parameters(whole_row).empty(), "a row-parallel bias without SP counted as partial");
}

// The two MLPs and attention with RoPE: split against whole on one rank.
HETPAR_WORKER(sp_blocks) {
  const CpGroups g = make_groups(rt);
  const int64_t seq = 8 * g.tp.size();
  const at::Tensor x0 = data("x", {2, seq, 32}), r = data("r", {2, seq, 32});
  const auto compare = [&](torch::nn::Module& split, torch::nn::Module& whole, const auto& run, const char* what) {
    at::Tensor x = leaf(mine(x0, g.tp)), xr = leaf(x0);
    const at::Tensor y = run(split, x);
    (y * mine(r, g.tp)).sum().backward();
    sum_tp_partial_grads(split, g.tp);
    const at::Tensor yr = run(whole, xr);
    (yr * r).sum().backward();
    expect_close(y, mine(yr.detach(), g.tp), std::string(what) + " output part");
    expect_close(x.grad(), mine(xr.grad(), g.tp), std::string(what) + " input grad part");
    expect_summed_grads_match(split, whole, g);  // CP is 1 here: the grads themselves
  };
  MlpSpec m{.name = "sp_swiglu", .hidden = 32, .ffn_hidden = 48, .seed = 42, .init_std = 0.2};
  MlpSpec m_split = m;
  m_split.sequence = TpSequence::kSplit;
  SwiGluMlp swiglu(m_split, g.tp), swiglu_ref(m, g.whole);
  compare(swiglu, swiglu_ref, [](torch::nn::Module& mod, const at::Tensor& in) {
    return static_cast<SwiGluMlp&>(mod).forward(in); }, "swiglu");
  m.name = m_split.name = "sp_gelu";
  GeluMlp gelu(m_split, g.tp), gelu_ref(m, g.whole);
  compare(gelu, gelu_ref, [](torch::nn::Module& mod, const at::Tensor& in) {
    return static_cast<GeluMlp&>(mod).forward(in); }, "gelu mlp (biases)");
  AttentionSpec a{.name = "sp_attn", .out_name = "o_proj", .hidden = 32, .heads = 8, .kv_heads = 4, .causal = true,
                  .seed = 42, .init_std = 0.2};
  AttentionSpec a_split = a;
  a_split.sequence = TpSequence::kSplit;
  ParallelAttention attn(a_split, g.tp), attn_ref(a, g.whole);
  const auto [cos, sin] = rope_tables(seq, 4, 10000.0);
  compare(attn, attn_ref, [&, cos = cos, sin = sin](torch::nn::Module& mod, const at::Tensor& in) {
    return static_cast<ParallelAttention&>(mod).forward(in, cos, sin); }, "attention");
}

// The whole LLM, split over TP inside each CP rank's part of the sequence:
// each row's gradient comes from the one rank holding its position.
HETPAR_WORKER(sp_llama) {
  const CpGroups g = make_groups(rt);
  LlamaModel local(kCrossingLlm, 42, g.tp, &g.cp, 0, 1, TpSequence::kSplit), whole(kCrossingLlm, 42, g.whole);
  expect_llm_matches_one_rank(local, whole, g, /*split=*/true, rt.world());
}

// rank_positions: the parts of every (cp, tp) rank cover the sequence once, each inside its CP rank's chunks.
TEST(SequenceParallel, RankPositionsSplitEachContextParallelPartInOrder) {
  const int64_t seq = 32;
  for (int cp : {1, 2}) {
    for (int tp : {1, 2, 4}) {
      std::vector<int> seen(seq, 0);
      for (int c = 0; c < cp; ++c) {
        std::vector<int64_t> joined;
        for (int t = 0; t < tp; ++t) {
          const at::Tensor p = rank_positions(seq, c, cp, t, tp);
          ASSERT_EQ(p.numel(), seq / cp / tp);
          for (int64_t i = 0; i < p.numel(); ++i) {
            ++seen[p[i].item<int64_t>()];
            joined.push_back(p[i].item<int64_t>());
          }
        }
        const at::Tensor chunks = cp_positions(seq, c, cp);
        ASSERT_EQ(int64_t(joined.size()), chunks.numel());
        for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], chunks[int64_t(i)].item<int64_t>());
      }
      for (int n : seen) EXPECT_EQ(n, 1) << "cp " << cp << " tp " << tp;
    }
  }
  EXPECT_THROW(rank_positions(30, 0, 1, 0, 4), std::invalid_argument);
}

struct SpCase {
  int tp, ranks;
};
std::string case_name(const ::testing::TestParamInfo<SpCase>& info) {
  return "tp" + std::to_string(info.param.tp) + "_cp" + std::to_string(info.param.ranks / info.param.tp);
}

class SequenceParallelLayers : public ::testing::TestWithParam<SpCase> {
 protected:
  void run(const char* worker) {
    WorkerOptions options;
    options.env.push_back({"HETPAR_TEST_TP", std::to_string(GetParam().tp)});
    EXPECT_TRUE(all_ranks_succeeded(run_workers(worker, GetParam().ranks, options)));
  }
};

TEST(SequenceParallel, CollectivesMatchTheirDefinitions) { EXPECT_TRUE(all_ranks_succeeded(run_workers("sp_collectives", 2))); }
TEST(SequenceParallel, LinearPairMatchesOneRank) { EXPECT_TRUE(all_ranks_succeeded(run_workers("sp_linear_pair", 2))); }
TEST(SequenceParallel, BlocksMatchOneRankAtTp2And4) {
  for (int tp : {2, 4}) {
    WorkerOptions options;
    options.env.push_back({"HETPAR_TEST_TP", std::to_string(tp)});
    EXPECT_TRUE(all_ranks_succeeded(run_workers("sp_blocks", tp, options))) << "tp " << tp;
  }
}
TEST_P(SequenceParallelLayers, LlmWithImageRowsMatchesOneRank) { run("sp_llama"); }

INSTANTIATE_TEST_SUITE_P(Sp, SequenceParallelLayers, ::testing::Values(SpCase{2, 2}, SpCase{4, 4}, SpCase{2, 4}),
                         case_name);

}  // namespace
}  // namespace hetpar::test
