// LLM context parallelism against the same computation on one rank (fp32,
// |a - b| <= 1e-6 + 1e-5 * max|b|): the zigzag split of the sequence, CP
// attention (outputs, input and weight gradients) and the whole LLM with
// image rows spliced in across chunk edges (logits, loss, the rows' and every
// parameter's gradient), at CP 2 and 4 and at TP 2 x CP 2.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "boundary/routing_plan.hpp"
#include "model/attention.hpp"
#include "model/context_attention.hpp"
#include "model/llama.hpp"
#include "model/param_init.hpp"
#include "model/rope.hpp"
#include "tests/dist_harness.hpp"
#include "tests/sequence_split_fixtures.hpp"
#include "train/sequence_part.hpp"

namespace hetpar::test {
namespace {


// Each CP rank must hold every position once, in ascending order, with the
// same causal work (sum of pos + 1) as every other rank, and be the rank the
// boundary's routing plan sends those positions' rows to.
TEST(ContextParallel, ZigzagChunksBalanceCausalWorkAndAgreeWithTheRoutingPlan) {
  const int64_t seq = 32;
  for (int cp : {1, 2, 4}) {
    std::vector<int> owner(seq, -1);
    std::vector<int64_t> work;
    for (int r = 0; r < cp; ++r) {
      const at::Tensor pos = cp_positions(seq, r, cp);
      ASSERT_EQ(pos.numel(), seq / cp);
      ASSERT_TRUE(at::equal(pos, std::get<0>(pos.sort()))) << "cp " << cp << " rank " << r << ": not ascending";
      int64_t w = 0;
      for (int64_t i = 0; i < pos.numel(); ++i) {
        const int64_t p = pos[i].item<int64_t>();
        ASSERT_EQ(owner[p], -1) << "position " << p << " held twice";
        owner[p] = r;
        EXPECT_EQ(cp_rank_of_position(p, seq, cp), r) << "the routing plan sends position " << p << " elsewhere";
        w += p + 1;
      }
      work.push_back(w);
    }
    for (int64_t w : work) EXPECT_EQ(w, work.front()) << "cp " << cp << ": causal work differs between ranks";
    EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
  }
}

HETPAR_WORKER(cp_attention) {
  const CpGroups g = make_groups(rt);
  const AttentionSpec a{.name = "attn_cp", .out_name = "o_proj", .hidden = 32, .heads = 8, .kv_heads = 4,
                        .causal = true, .seed = 42, .init_std = 0.2};
  ParallelAttention local(a, g.tp, &g.cp), whole(a, g.whole);
  const int64_t seq = 32;
  const at::Tensor pos = cp_positions(seq, g.cp.rank(), g.cp.size());
  const at::Tensor x0 = data("x", {2, seq, 32}), r = data("r", {2, seq, 32});
  const auto [cos, sin] = rope_tables(seq, 4, 10000.0);
  at::Tensor x = leaf(x0.index_select(1, pos)), xr = leaf(x0);
  const at::Tensor y = local.forward(x, cos.index_select(0, pos), sin.index_select(0, pos));
  (y * r.index_select(1, pos)).sum().backward();
  const at::Tensor yr = whole.forward(xr, cos, sin);
  (yr * r).sum().backward();
  expect_close(y, yr.detach().index_select(1, pos), "cp attention output");
  expect_close(x.grad(), xr.grad().index_select(1, pos), "cp attention input grad");
  expect_summed_grads_match(local, whole, g);
}

// The TP ranks hold every row of their CP rank's part: the rows' gradient summed over CP is the whole.
HETPAR_WORKER(cp_llama) {
  const CpGroups g = make_groups(rt);
  LlamaModel local(kCrossingLlm, 42, g.tp, &g.cp), whole(kCrossingLlm, 42, g.whole);
  expect_llm_matches_one_rank(local, whole, g, /*split=*/false, g.cp);
}

struct CpCase {
  int tp, ranks;
};
std::string case_name(const ::testing::TestParamInfo<CpCase>& info) {
  return "tp" + std::to_string(info.param.tp) + "_cp" + std::to_string(info.param.ranks / info.param.tp);
}

class ContextParallelLayers : public ::testing::TestWithParam<CpCase> {
 protected:
  void run(const char* worker) {
    WorkerOptions options;
    options.env.push_back({"HETPAR_TEST_TP", std::to_string(GetParam().tp)});
    EXPECT_TRUE(all_ranks_succeeded(run_workers(worker, GetParam().ranks, options)));
  }
};

TEST_P(ContextParallelLayers, AttentionMatchesOneRank) { run("cp_attention"); }
TEST_P(ContextParallelLayers, LlmWithImageRowsMatchesOneRank) { run("cp_llama"); }

INSTANTIATE_TEST_SUITE_P(Cp, ContextParallelLayers, ::testing::Values(CpCase{1, 2}, CpCase{1, 4}, CpCase{2, 4}),
                         case_name);

}  // namespace
}  // namespace hetpar::test
