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
#include "train/sequence_part.hpp"

namespace hetpar::test {
namespace {

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }
at::Tensor data(const std::string& name, at::IntArrayRef shape) { return init_normal(7, name, shape, 1.0); }

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

struct CpGroups {
  Group& whole;  // this rank alone: the single-rank reference
  Group& tp;
  Group& cp;
};

// tp x cp over the world, tp fastest (the rank grid's order).
CpGroups make_groups(Runtime& rt) {
  const int tp = std::atoi(std::getenv("HETPAR_TEST_TP")), n = rt.world_size(), cp = n / tp;
  std::vector<GroupSpec> specs;
  for (int r = 0; r < n; ++r) specs.push_back({"alone" + std::to_string(r), {r}});
  auto tp_ranks = [&](int c) { std::vector<int> v; for (int t = 0; t < tp; ++t) v.push_back(c * tp + t); return v; };
  auto cp_ranks = [&](int t) { std::vector<int> v; for (int c = 0; c < cp; ++c) v.push_back(c * tp + t); return v; };
  for (int c = 0; c < cp; ++c) specs.push_back({"tp" + std::to_string(c), tp_ranks(c)});
  for (int t = 0; t < tp; ++t) specs.push_back({"cp" + std::to_string(t), cp_ranks(t)});
  rt.create_groups(specs);
  return {rt.group({rt.rank()}), rt.group(tp_ranks(rt.rank() / tp)), rt.group(cp_ranks(rt.rank() % tp))};
}

// A CP rank's gradient of a replicated (across CP) parameter is its part's:
// summed over the CP group it is the whole gradient, then this TP rank's shard.
void expect_summed_grads_match(torch::nn::Module& local, torch::nn::Module& whole, const CpGroups& g) {
  const auto want = whole.named_parameters();
  const auto got = local.named_parameters();
  require(got.size() == want.size() && !got.is_empty(), "{} parameters, the reference has {}", got.size(), want.size());
  for (const auto& p : got) {
    at::Tensor grad = p.value().grad().clone();
    g.cp.all_reduce(grad);
    at::Tensor full = want[p.key()].grad();
    for (int64_t d = 0; d < full.dim(); ++d) {
      if (full.size(d) != grad.size(d)) full = shard(full, d, g.tp.rank(), g.tp.size());
    }
    expect_close(grad, full, p.key() + " grad");
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

// Two samples; image spans that cross chunk edges at CP 2 and 4 (chunks of 8 and 4).
MicroBatch llm_batch(const LlmConfig& c) {
  MicroBatch b;
  b.ids = (data("ids", {2, c.seq_len}).abs() * 1000).to(at::kLong).remainder(c.vocab_size - 3) + 3;
  b.image_mask = at::zeros({2, c.seq_len}, at::kBool);
  b.image_mask[0].narrow(0, 3, 7).fill_(true);
  b.image_mask[1].narrow(0, 14, 6).fill_(true);
  b.image_mask[1].narrow(0, 26, 4).fill_(true);
  b.ids.masked_fill_(b.image_mask, c.image_token_id);
  b.targets = at::full_like(b.ids, -100);
  b.targets.narrow(1, 0, c.seq_len - 1).copy_(b.ids.narrow(1, 1, c.seq_len - 1));
  b.targets.masked_fill_(b.targets == c.image_token_id, -100);
  return b;
}

HETPAR_WORKER(cp_llama) {
  const CpGroups g = make_groups(rt);
  const LlmConfig c{.vocab_size = 64, .hidden = 32, .heads = 8, .kv_heads = 4, .ffn_hidden = 48, .seq_len = 32,
                    .rope_theta = 5000};
  LlamaModel local(c, 42, g.tp, &g.cp), whole(c, 42, g.whole);
  const MicroBatch b = llm_batch(c);
  const double targets = (b.targets >= 0).sum().item<double>();
  const at::Tensor rows0 = data("rows", {b.image_mask.sum().item<int64_t>(), c.hidden});
  at::Tensor rows = leaf(rows0), rows_ref = leaf(rows0);

  const MicroBatch part = sequence_part(b, g.cp);
  const at::Tensor logits = local.forward(part.ids, image_rows_of_part(rows, b.image_mask, g.cp), part.image_mask);
  const at::Tensor loss = local.loss_sum(logits, part.targets) / targets;
  loss.backward();
  const at::Tensor logits_ref = whole.forward(b.ids, rows_ref, b.image_mask);
  const at::Tensor loss_ref = whole.loss_sum(logits_ref, b.targets) / targets;
  loss_ref.backward();

  const at::Tensor pos = cp_positions(c.seq_len, g.cp.rank(), g.cp.size());
  expect_close(logits, shard(logits_ref.detach().index_select(1, pos), 2, g.tp.rank(), g.tp.size()), "cp logits");
  at::Tensor total = loss.detach().clone();
  g.cp.all_reduce(total);
  expect_close(total, loss_ref.detach(), "loss summed over the cp ranks");
  at::Tensor rows_grad = rows.grad().defined() ? rows.grad().clone() : at::zeros_like(rows);
  g.cp.all_reduce(rows_grad);
  expect_close(rows_grad, rows_ref.grad(), "image rows grad summed over the cp ranks");
  expect_summed_grads_match(local, whole, g);
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
