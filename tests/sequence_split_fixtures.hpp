// What the tests of the sequence's splits over ranks (context parallelism,
// sequence parallelism) share: the tp x cp groups, the single-rank
// reference's gradients brought to a rank's shard, and a batch whose image
// spans cross the chunks' edges.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "data/batch_source.hpp"
#include "dist/runtime.hpp"
#include "model/context_attention.hpp"
#include "model/llama.hpp"
#include "model/param_init.hpp"
#include "tests/dist_harness.hpp"
#include "tp/partial_grads.hpp"
#include "train/sequence_part.hpp"

namespace hetpar::test {

inline at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }
inline at::Tensor data(const std::string& name, at::IntArrayRef shape) { return init_normal(7, name, shape, 1.0); }

struct CpGroups {
  Group& whole;  // this rank alone: the single-rank reference
  Group& tp;
  Group& cp;
};

// tp x cp over the world, tp fastest (the rank grid's order).
inline CpGroups make_groups(Runtime& rt) {
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
inline void expect_summed_grads_match(torch::nn::Module& local, torch::nn::Module& whole, const CpGroups& g) {
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

// What the trainer does once a step under sequence parallelism: the
// replicated weights' gradients, each rank's part's, summed over TP. Returns
// how many parameters that was.
inline size_t sum_tp_partial_grads(torch::nn::Module& m, Group& tp) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : tp_partial_parameters(m)) grads.push_back(p.grad());
  sum_over_group(grads, tp);
  return grads.size();
}

// Two samples; image spans that cross chunk edges at CP 2 and 4 (chunks of 8 and 4).
inline MicroBatch llm_batch(const LlmConfig& c) {
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

// An LLM small enough for every rank, with sequences of 32 (llm_batch's images cross chunk edges).
inline const LlmConfig kCrossingLlm{.vocab_size = 64, .hidden = 32, .heads = 8, .kv_heads = 4, .ffn_hidden = 48,
                                    .seq_len = 32, .rope_theta = 5000};

// `local` on this rank's part of llm_batch (its CP chunks; `split`: its TP
// rank's share of them) against `whole` on one rank: the logits of the CP
// part (this rank's vocab shard), the loss summed over CP, the image rows'
// gradient summed over `rows_sum` (the ranks each row's gradient is divided
// among), and every parameter's gradient.
inline void expect_llm_matches_one_rank(LlamaModel& local, LlamaModel& whole, const CpGroups& g, bool split,
                                        Group& rows_sum) {
  const LlmConfig& c = kCrossingLlm;
  const MicroBatch b = llm_batch(c);
  const double targets = (b.targets >= 0).sum().item<double>();
  const at::Tensor rows0 = data("rows", {b.image_mask.sum().item<int64_t>(), c.hidden});
  at::Tensor rows = leaf(rows0), rows_ref = leaf(rows0);

  const MicroBatch part = sequence_part(b, g.cp);
  const at::Tensor mine = split ? image_rows_of_part(rows, b.image_mask, g.cp.rank(), g.cp.size(), g.tp.rank(), g.tp.size())
                                : image_rows_of_part(rows, b.image_mask, g.cp);
  const at::Tensor logits = local.forward(part.ids, mine, part.image_mask);
  const at::Tensor loss = local.loss_sum(logits, part.targets) / targets;
  loss.backward();
  const at::Tensor logits_ref = whole.forward(b.ids, rows_ref, b.image_mask);
  const at::Tensor loss_ref = whole.loss_sum(logits_ref, b.targets) / targets;
  loss_ref.backward();
  // Split, the norms' gradients are each TP rank's part's (2 a layer and the final one) until summed.
  const size_t partial = sum_tp_partial_grads(local, g.tp);
  require(partial == (split && g.tp.size() > 1 ? size_t(2 * c.layers + 1) : 0), "{} TP-partial parameters", partial);

  // Split or not, the head's logits are those of the whole CP part.
  const at::Tensor pos = cp_positions(c.seq_len, g.cp.rank(), g.cp.size());
  expect_close(logits, shard(logits_ref.detach().index_select(1, pos), 2, g.tp.rank(), g.tp.size()), "logits");
  at::Tensor total = loss.detach().clone();
  g.cp.all_reduce(total);
  expect_close(total, loss_ref.detach(), "loss summed over the cp ranks");
  at::Tensor rows_grad = rows.grad().defined() ? rows.grad().clone() : at::zeros_like(rows);
  rows_sum.all_reduce(rows_grad);
  expect_close(rows_grad, rows_ref.grad(), "image rows grad summed over the ranks holding them");
  expect_summed_grads_match(local, whole, g);
}

}  // namespace hetpar::test
