// Every tensor-parallel layer at TP 1, 2 and 4 against the dense single-rank
// computation with the same full weights: outputs, input gradients and weight
// gradients, fp32, |a - b| <= 1e-6 + 1e-5 * max|b|.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function_hook.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "metrics/cpu_tensor_memory.hpp"
#include "model/attention.hpp"
#include "model/mlp.hpp"
#include "model/norms.hpp"
#include "model/rope.hpp"
#include "model/param_init.hpp"
#include "tests/dist_harness.hpp"
#include "tests/norm_checks.hpp"
#include "tp/parallel_linear.hpp"
#include "tp/vocab_parallel.hpp"
#include "tp/weight_cast.hpp"
#include "tp/weight_grad.hpp"
#include "model/autocast_scope.hpp"

namespace hetpar::test {
namespace {



at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }
at::Tensor data(const std::string& name, at::IntArrayRef shape) { return init_normal(7, name, shape, 1.0); }

LinearSpec spec(const std::string& name, int64_t in, int64_t out) {
  LinearSpec s;
  s.name = name;
  s.in = in;
  s.out = out;
  s.seed = 42;
  s.init_std = 0.2;
  return s;
}

// y = x W^T + b through a column-parallel layer, output left sharded.
HETPAR_WORKER(column_parallel) {
  Group& tp = rt.world();
  const LinearSpec s = spec("col", 12, 16);
  ColumnParallelLinear layer(s, tp);
  const at::Tensor x0 = data("x", {3, 5, 12}), r = data("r", {3, 5, 16});
  at::Tensor x = leaf(x0), xr = leaf(x0), w = leaf(full_linear_weight(s)), b = leaf(full_linear_bias(s));
  at::Tensor y = layer.forward(x);
  (y * shard(r, 2, tp.rank(), tp.size())).sum().backward();
  at::Tensor yr = at::linear(xr, w, b);
  (yr * r).sum().backward();
  expect_close(y, shard(yr.detach(), 2, tp.rank(), tp.size()), "output shard");
  expect_close(x.grad(), xr.grad(), "input grad");
  expect_close(layer.weight.grad(), shard(w.grad(), 0, tp.rank(), tp.size()), "weight grad");
  expect_close(layer.bias.grad(), shard(b.grad(), 0, tp.rank(), tp.size()), "bias grad");
}

HETPAR_WORKER(column_parallel_gathered) {
  Group& tp = rt.world();
  const LinearSpec s = spec("colg", 8, 12);
  ColumnParallelLinear layer(s, tp, /*gather_output=*/true);
  const at::Tensor x0 = data("x", {4, 8}), r = data("r", {4, 12});
  at::Tensor x = leaf(x0), xr = leaf(x0), w = leaf(full_linear_weight(s));
  at::Tensor y = layer.forward(x);
  (y * r).sum().backward();
  at::Tensor yr = at::linear(xr, w, full_linear_bias(s));
  (yr * r).sum().backward();
  expect_close(y, yr.detach(), "gathered output");
  expect_close(x.grad(), xr.grad(), "input grad");
  expect_close(layer.weight.grad(), shard(w.grad(), 0, tp.rank(), tp.size()), "weight grad");
}

HETPAR_WORKER(row_parallel) {
  Group& tp = rt.world();
  const LinearSpec s = spec("row", 16, 6);
  for (bool sharded_input : {true, false}) {
    RowParallelLinear layer(s, tp, sharded_input);
    const at::Tensor x0 = data("x", {2, 3, 16}), r = data("r", {2, 3, 6});
    at::Tensor x = leaf(sharded_input ? shard(x0, 2, tp.rank(), tp.size()) : x0);
    at::Tensor xr = leaf(x0), w = leaf(full_linear_weight(s)), b = leaf(full_linear_bias(s));
    at::Tensor y = layer.forward(x);
    (y * r).sum().backward();
    at::Tensor yr = at::linear(xr, w, b);
    (yr * r).sum().backward();
    const std::string tag = sharded_input ? "sharded input: " : "full input: ";
    expect_close(y, yr.detach(), tag + "output");
    expect_close(x.grad(), sharded_input ? shard(xr.grad(), 2, tp.rank(), tp.size()) : xr.grad(), tag + "input grad");
    expect_close(layer.weight.grad(), shard(w.grad(), 1, tp.rank(), tp.size()), tag + "weight grad");
    expect_close(layer.bias.grad(), b.grad(), tag + "bias grad");
  }
}

// The tensor-parallel MLP: column-parallel -> GELU -> row-parallel, one all-reduce.
HETPAR_WORKER(column_row_mlp) {
  Group& tp = rt.world();
  const LinearSpec s1 = spec("fc1", 8, 32), s2 = spec("fc2", 32, 8);
  ColumnParallelLinear fc1(s1, tp);
  RowParallelLinear fc2(s2, tp);
  const at::Tensor x0 = data("x", {6, 8}), r = data("r", {6, 8});
  at::Tensor x = leaf(x0), xr = leaf(x0), w1 = leaf(full_linear_weight(s1)), w2 = leaf(full_linear_weight(s2));
  at::Tensor y = fc2.forward(at::gelu(fc1.forward(x)));
  (y * r).sum().backward();
  at::Tensor yr = at::linear(at::gelu(at::linear(xr, w1, full_linear_bias(s1))), w2, full_linear_bias(s2));
  (yr * r).sum().backward();
  expect_close(y, yr.detach(), "output");
  expect_close(x.grad(), xr.grad(), "input grad");
  expect_close(fc1.weight.grad(), shard(w1.grad(), 0, tp.rank(), tp.size()), "fc1 weight grad");
  expect_close(fc2.weight.grad(), shard(w2.grad(), 1, tp.rank(), tp.size()), "fc2 weight grad");
}

// Two micro-batches with repeated ids, their gradients accumulated into the
// table's .grad (the layer places each row's gradient there itself), then a
// frozen table, which gets none.
HETPAR_WORKER(vocab_parallel_embedding) {
  Group& tp = rt.world();
  const int64_t vocab = 32, hidden = 6;
  VocabParallelEmbedding emb("emb", vocab, hidden, 42, 0.5, tp);
  at::Tensor w = leaf(init_normal(42, "emb.weight", {vocab, hidden}, 0.5));
  for (int64_t micro_batch = 0; micro_batch < 2; ++micro_batch) {
    const at::Tensor ids = (at::arange(40, at::kLong).reshape({4, 10}) * (7 + 4 * micro_batch) + micro_batch) % vocab;
    const at::Tensor r = data("r" + std::to_string(micro_batch), {4, 10, hidden});
    at::Tensor y = emb.forward(ids);
    (y * r).sum().backward();
    at::Tensor yr = at::embedding(w, ids);
    (yr * r).sum().backward();
    expect_close(y, yr.detach(), "output");
    expect_close(emb.weight.grad(), shard(w.grad(), 0, tp.rank(), tp.size()), "weight grad");
  }
  emb.weight.set_requires_grad(false);
  emb.weight.mutable_grad().reset();
  const at::Tensor ids = at::arange(12, at::kLong) * 5 % vocab;
  at::Tensor scale = leaf(data("scale", {hidden}));  // something downstream still trains
  const at::Tensor y = emb.forward(ids);
  (y * scale).sum().backward();
  expect_close(y, at::embedding(w, ids).detach(), "frozen output");
  require(!emb.weight.grad().defined() && scale.grad().defined(), "a frozen table got a gradient");
}

HETPAR_WORKER(vocab_parallel_cross_entropy) {
  Group& tp = rt.world();
  const int64_t n = 9, vocab = 24;
  const at::Tensor logits0 = data("logits", {n, vocab}) * 3, weights = data("w", {n});
  const at::Tensor targets = at::tensor({0, 23, 5, -100, 12, 11, 6, -100, 17}, at::kLong);
  at::Tensor local = leaf(shard(logits0, 1, tp.rank(), tp.size())), full = leaf(logits0);
  at::Tensor loss = vocab_parallel_cross_entropy(local, targets, tp);
  (loss * weights).sum().backward();
  at::Tensor loss_ref = at::cross_entropy_loss(full, targets, {}, at::Reduction::None, -100);
  (loss_ref * weights).sum().backward();
  expect_close(loss, loss_ref.detach(), "per-token loss");
  expect_close(local.grad(), shard(full.grad(), 1, tp.rank(), tp.size()), "logit grad");
}

// The summed loss the model uses: vocab-parallel over TP, the library's
// log-softmax on one rank. Against the dense loss in fp32, every negative
// target ignored; bf16 logits are summed in fp32 exactly as their fp32 values
// would be (fp32 tolerance), and their gradient comes back in bf16.
HETPAR_WORKER(cross_entropy_sum) {
  Group& tp = rt.world();
  const int64_t n = 9, vocab = 24;
  const at::Tensor logits0 = data("logits", {n, vocab}) * 3;
  const at::Tensor targets = at::tensor({0, 23, 5, -100, 12, -1, 6, -100, 17}, at::kLong);
  const at::Tensor dense_targets = targets.masked_fill(targets < 0, -100);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor values = logits0.to(dtype);
    at::Tensor local = leaf(shard(values, 1, tp.rank(), tp.size())), full = leaf(values.to(at::kFloat));
    const at::Tensor loss = cross_entropy_sum(local, targets, tp);
    require(loss.dim() == 0 && loss.scalar_type() == at::kFloat, "the loss is not an fp32 scalar");
    (loss * 0.37).backward();
    const at::Tensor loss_ref = at::cross_entropy_loss(full, dense_targets, {}, at::Reduction::Sum, -100);
    (loss_ref * 0.37).backward();
    const std::string what = c10::toString(dtype);
    expect_close(loss, loss_ref.detach(), what + " summed loss");
    require(local.grad().scalar_type() == dtype, "{} logits got a {} gradient", what, c10::toString(local.grad().scalar_type()));
    const at::Tensor want = shard(full.grad(), 1, tp.rank(), tp.size());
    if (dtype == at::kFloat) {
      expect_close(local.grad(), want, what + " logit grad");
    } else {  // the fp32 gradient rounded once to bf16
      expect_close(local.grad().to(at::kFloat), want, what + " logit grad", 1e-2, 1e-6);
    }
  }
}

// Attention written out by hand: per-head kv mapping h -> h / (H / KV), the
// half-rotation RoPE formula, explicit causal softmax. q/k/v/o from full weights.
// `leaves` receives the full weights and biases it used, as leaves named like
// the module's parameters ("q_proj.weight"), so their gradients can be compared.
at::Tensor dense_attention(const at::Tensor& x, const AttentionSpec& a, bool rope,
                           std::map<std::string, at::Tensor>& leaves) {
  auto w = [&](const std::string& n, int64_t in, int64_t out) {
    LinearSpec s = spec(a.name + "." + n, in, out);
    s.bias = a.bias;
    s.seed = a.seed;
    s.init_std = a.init_std;
    leaves[n + ".weight"] = leaf(full_linear_weight(s));
    if (a.bias) leaves[n + ".bias"] = leaf(full_linear_bias(s));
    return n;
  };
  const int64_t b = x.size(0), n = x.size(1), d = a.hidden / a.heads, group = a.heads / a.kv_heads;
  auto bias = [&](const std::string& name) { return a.bias ? leaves[name + ".bias"] : at::Tensor(); };
  auto project = [&](const std::string& name) { return at::linear(x, leaves[name + ".weight"], bias(name)); };
  at::Tensor q = project(w("q_proj", a.hidden, a.hidden)).view({b, n, a.heads, d});
  at::Tensor k = project(w("k_proj", a.hidden, a.kv_heads * d)).view({b, n, a.kv_heads, d});
  at::Tensor v = project(w("v_proj", a.hidden, a.kv_heads * d)).view({b, n, a.kv_heads, d});
  if (rope) {
    auto rotate = [&](const at::Tensor& t) {
      at::Tensor out = t.clone();
      for (int64_t pos = 0; pos < n; ++pos) {
        for (int64_t i = 0; i < d / 2; ++i) {
          const double angle = pos / std::pow(10000.0, 2.0 * i / d), c = std::cos(angle), s = std::sin(angle);
          at::Tensor x1 = t.select(1, pos).select(-1, i), x2 = t.select(1, pos).select(-1, i + d / 2);
          out.select(1, pos).select(-1, i).copy_(x1 * c - x2 * s);
          out.select(1, pos).select(-1, i + d / 2).copy_(x2 * c + x1 * s);
        }
      }
      return out;
    };
    q = rotate(q);
    k = rotate(k);
  }
  const at::Tensor kv_of_head = at::div(at::arange(a.heads, at::kLong), group, "floor");
  k = k.index_select(2, kv_of_head);
  v = v.index_select(2, kv_of_head);
  at::Tensor scores = at::einsum("bshd,bthd->bhst", {q, k}) / std::sqrt(static_cast<double>(d));
  if (a.causal) scores = scores.masked_fill(at::ones({n, n}, at::kBool).triu(1), -INFINITY);
  at::Tensor o = at::einsum("bhst,bthd->bshd", {scores.softmax(-1), v}).reshape({b, n, a.hidden});
  const std::string out = w(a.out_name, a.hidden, a.hidden);
  return at::linear(o, leaves[out + ".weight"], bias(out));
}

// GQA + RoPE + causal (the LLM's attention) and plain bidirectional with
// biases (the encoder's), each against the hand-written version.
HETPAR_WORKER(attention) {
  Group& tp = rt.world();
  for (bool llm : {true, false}) {
    AttentionSpec a;
    a.name = llm ? "attn_llm" : "attn_vit";
    a.out_name = llm ? "o_proj" : "out_proj";
    a.hidden = 32;
    a.heads = 8;
    a.kv_heads = llm ? 4 : 8;
    a.causal = llm;
    a.bias = !llm;
    a.seed = 42;
    a.init_std = 0.2;
    ParallelAttention attn(a, tp);
    const at::Tensor x0 = data("x", {2, 6, 32}), r = data("r", {2, 6, 32});
    at::Tensor x = leaf(x0), xr = leaf(x0);
    at::Tensor cos, sin;
    if (llm) std::tie(cos, sin) = rope_tables(6, 4, 10000.0);
    at::Tensor y = attn.forward(x, cos, sin);
    (y * r).sum().backward();
    std::map<std::string, at::Tensor> dense;
    at::Tensor yr = dense_attention(xr, a, llm, dense);
    (yr * r).sum().backward();
    expect_close(y, yr.detach(), a.name + " output");
    expect_close(x.grad(), xr.grad(), a.name + " input grad");
    // q, k and v run as one GEMM: each projection's own shard still gets its own gradient.
    for (const auto& param : attn.named_parameters()) {
      const std::string& name = param.key();
      const bool output_projection = name.rfind(a.out_name, 0) == 0;
      at::Tensor want = dense.at(name).grad();
      if (!output_projection) want = shard(want, 0, tp.rank(), tp.size());
      else if (name.find(".weight") != std::string::npos) want = shard(want, 1, tp.rank(), tp.size());
      // A key bias adds the same q.b to every logit of a query's row, which the
      // softmax cancels: its gradient is zero but for rounding, so both sides
      // are noise of the size of the terms summed (the input gradient's), not
      // of the reference's own (~1e-7) scale.
      const bool key_bias = name.find("k_proj.bias") != std::string::npos;
      const double atol = key_bias ? 1e-5 * xr.grad().abs().max().item<double>() : 1e-6;
      expect_close(param.value().grad(), want, a.name + " " + name + " grad", 1e-5, atol);
    }
    require(attn.named_parameters().size() == (llm ? 4u : 8u), "{}: {} parameters", a.name, attn.named_parameters().size());
  }
}

// The full weight of one of SwiGluMlp "swiglu"'s projections, as a leaf.
at::Tensor swiglu_weight(const char* name, int64_t in, int64_t out) {
  LinearSpec s = spec(std::string("swiglu.") + name, in, out);
  s.bias = false;
  return leaf(full_linear_weight(s));
}

// The Llama MLP: gate and up in one GEMM, silu(gate) * up, down; against the dense three matmuls.
HETPAR_WORKER(swiglu_mlp) {
  Group& tp = rt.world();
  const MlpSpec m{"swiglu", 8, 16, 42, 0.2};
  SwiGluMlp mlp(m, tp);
  at::Tensor wg = swiglu_weight("gate_proj", 8, 16), wu = swiglu_weight("up_proj", 8, 16),
             wd = swiglu_weight("down_proj", 16, 8);
  const at::Tensor x0 = data("x", {3, 5, 8}), r = data("r", {3, 5, 8});
  at::Tensor x = leaf(x0), xr = leaf(x0);
  at::Tensor y = mlp.forward(x);
  (y * r).sum().backward();
  at::Tensor yr = at::linear(at::silu(at::linear(xr, wg)) * at::linear(xr, wu), wd);
  (yr * r).sum().backward();
  expect_close(y, yr.detach(), "output");
  expect_close(x.grad(), xr.grad(), "input grad");
  const auto params = mlp.named_parameters();
  expect_close(params["gate_proj.weight"].grad(), shard(wg.grad(), 0, tp.rank(), tp.size()), "gate weight grad");
  expect_close(params["up_proj.weight"].grad(), shard(wu.grad(), 0, tp.rank(), tp.size()), "up weight grad");
  expect_close(params["down_proj.weight"].grad(), shard(wd.grad(), 1, tp.rank(), tp.size()), "down weight grad");
}

// RoPE as one autograd function against the rotate-half formula it replaces,
// on a strided input (q and k are transposed views): output and gradient.
HETPAR_WORKER(rope) {
  const int64_t seq = 7, d = 8;
  const auto [cos, sin] = rope_tables(seq, d, 10000.0);
  const at::Tensor base0 = data("x", {2, seq, 3, d}), r = data("r", {2, 3, seq, d});
  at::Tensor base = leaf(base0), base_ref = leaf(base0);
  const at::Tensor y = apply_rope(base.transpose(1, 2), cos, sin);  // [B, H, S, d], strided
  (y * r).sum().backward();
  const at::Tensor x = base_ref.transpose(1, 2), c = at::cat({cos, cos}, -1), s = at::cat({sin, sin}, -1);
  const at::Tensor rotated = at::cat({-x.narrow(-1, d / 2, d / 2), x.narrow(-1, 0, d / 2)}, -1);
  const at::Tensor yr = x * c + rotated * s;
  (yr * r).sum().backward();
  require(y.transpose(1, 2).is_contiguous(), "output not laid out sequence first");
  expect_close(y, yr.detach(), "rope output", 1e-6, 1e-7);
  expect_close(base.grad(), base_ref.grad(), "rope input grad", 1e-6, 1e-7);
}

// bf16 autocast (run.precision = "bf16"): the TP attention and SwiGLU MLP
// against the dense fp32 computation. Outputs are bf16, weight gradients fp32,
// and both within bf16's tolerance of the fp32 values (3e-2 of the largest
// value: 8-bit mantissas through two or three matmuls) but not equal to them.
HETPAR_WORKER(bf16_blocks) {
  Group& tp = rt.world();
  const double rtol = 3e-2;
  auto check = [&](const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    expect_close(got.to(at::kFloat), want, what, rtol, 1e-6);
    const double scale = want.abs().max().item<double>();
    require((got.to(at::kFloat) - want).abs().max().item<double>() > 1e-6 * scale, "{}: equal to fp32, bf16 not in effect", what);
  };
  AttentionSpec a;
  a.name = "attn_llm";
  a.out_name = "o_proj";
  a.hidden = 32;
  a.heads = 8;
  a.kv_heads = 4;
  a.causal = true;
  a.seed = 42;
  a.init_std = 0.2;
  ParallelAttention attn(a, tp);
  const at::Tensor x0 = data("x", {2, 6, 32}), r = data("r", {2, 6, 32});
  at::Tensor x = leaf(x0), xr = leaf(x0);
  const auto [cos, sin] = rope_tables(6, 4, 10000.0);
  at::Tensor y;
  {
    const AutocastScope autocast(true);
    y = attn.forward(x, cos, sin);
  }
  require(y.scalar_type() == at::kBFloat16, "attention output is {}, not bf16", c10::toString(y.scalar_type()));
  (y.to(at::kFloat) * r).sum().backward();
  std::map<std::string, at::Tensor> dense;
  at::Tensor yr = dense_attention(xr, a, true, dense);
  (yr * r).sum().backward();
  check(y, yr.detach(), "bf16 attention output");
  check(x.grad(), xr.grad(), "bf16 attention input grad");
  const at::Tensor wo = attn.named_parameters()["o_proj.weight"].grad();
  require(wo.scalar_type() == at::kFloat, "a weight gradient is {}, not fp32", c10::toString(wo.scalar_type()));
  check(wo, shard(dense.at("o_proj.weight").grad(), 1, tp.rank(), tp.size()), "bf16 o_proj weight grad");

  const MlpSpec m{"swiglu", 8, 16, 42, 0.2};
  SwiGluMlp mlp(m, tp);
  at::Tensor wg = swiglu_weight("gate_proj", 8, 16), wu = swiglu_weight("up_proj", 8, 16),
             wd = swiglu_weight("down_proj", 16, 8);
  const at::Tensor u0 = data("u", {3, 5, 8}), q = data("q", {3, 5, 8});
  at::Tensor u = leaf(u0), ur = leaf(u0);
  at::Tensor z;
  {
    const AutocastScope autocast(true);
    z = mlp.forward(u);
  }
  (z.to(at::kFloat) * q).sum().backward();
  at::Tensor zr = at::linear(at::silu(at::linear(ur, wg)) * at::linear(ur, wu), wd);
  (zr * q).sum().backward();
  check(z, zr.detach(), "bf16 mlp output");
  check(mlp.named_parameters()["down_proj.weight"].grad(), shard(wd.grad(), 1, tp.rank(), tp.size()),
        "bf16 down weight grad");
}

class TpLayers : public ::testing::TestWithParam<int> {};

#define TP_LAYER_TEST(name) \
  TEST_P(TpLayers, name) { EXPECT_TRUE(all_ranks_succeeded(run_workers(#name, GetParam()))); }

TP_LAYER_TEST(column_parallel)
TP_LAYER_TEST(column_parallel_gathered)
TP_LAYER_TEST(row_parallel)
TP_LAYER_TEST(column_row_mlp)
TP_LAYER_TEST(vocab_parallel_embedding)
TP_LAYER_TEST(vocab_parallel_cross_entropy)
TP_LAYER_TEST(cross_entropy_sum)
TP_LAYER_TEST(attention)
TP_LAYER_TEST(swiglu_mlp)
TP_LAYER_TEST(bf16_blocks)

// A step's bf16 weight copies outlive each forward's autocast scope (one cast
// a step, not one a micro-batch) and go with the step, so an optimizer's
// in-place update is seen by the next step's cast.
TEST(StepCastCache, KeepsOneBf16CopyOfAWeightForTheStep) {
  const at::Tensor w = at::ones({4, 4}).set_requires_grad(true), x = at::ones({2, 4});
  auto cast = [&] {
    const AutocastScope autocast(true);
    return compute_weight(w, x);
  };
  {
    const StepCastCache step(true);
    const at::Tensor first = cast(), second = cast();
    EXPECT_EQ(first.scalar_type(), at::kBFloat16);
    // Each forward gets its own view of the one copy (its own node: see the next test).
    EXPECT_EQ(first.data_ptr(), second.data_ptr()) << "the second micro-batch cast the weight again";
  }
  {
    at::NoGradGuard no_grad;
    w.mul_(2);  // the optimizer's step
  }
  EXPECT_EQ(cast().max().item<float>(), 2.0f) << "a stale copy survived the step";
  EXPECT_NE(cast().data_ptr(), cast().data_ptr()) << "without a step cache each forward casts anew";
  EXPECT_TRUE(compute_weight(w, x).is_same(w)) << "outside autocast the weight itself";
}

// A later micro-batch's weight gradient reaches .grad as soon as its GEMM's
// backward makes it, not at the end of the backward: in the second
// micro-batch of two linears, the second layer's gradient is in .grad by the
// time the first layer's input gradient is made. (A copy's node made in the
// first micro-batch and reused ran last, holding every weight's gradient.)
TEST(StepCastCache, ALaterMicroBatchsWeightGradientIsAddedAtOnce) {
  const at::Tensor w1 = data("w1", {5, 5}).set_requires_grad(true), w2 = data("w2", {5, 5}).set_requires_grad(true);
  const StepCastCache step(true);
  at::Tensor w2_grad_when_x_got_its;
  for (int m = 0; m < 2; ++m) {
    const at::Tensor x = data("x" + std::to_string(m), {3, 5}).set_requires_grad(true);
    if (m == 1) x.register_hook([&](const at::Tensor&) { w2_grad_when_x_got_its = w2.grad().clone(); });
    at::Tensor y;
    {
      const AutocastScope autocast(true);
      // One statement each: a layer takes its copy just before its GEMM, as the model's do.
      const at::Tensor h = at::linear(x, compute_weight(w1, x));
      y = at::linear(h, compute_weight(w2, h));
    }
    y.to(at::kFloat).sum().backward();
  }
  ASSERT_TRUE(w2_grad_when_x_got_its.defined());
  EXPECT_TRUE(at::equal(w2_grad_when_x_got_its, w2.grad())) << "the second micro-batch's gradient came late";
}

// q/k/v-style projections on one input: under bf16 autocast one GEMM on the
// step's concatenated copy, in fp32 separate GEMMs; either way each weight's
// gradient and the input's match the projections run one by one (autocast's
// own casts in bf16), over two micro-batches.
TEST(StepCastCache, FusedProjectionsMatchSeparateOnes) {
  const at::Tensor a0 = data("a", {6, 5}), b0 = data("b", {2, 5});
  for (const bool bf16 : {false, true}) {
    auto run = [&](bool fused) {
      at::Tensor a = leaf(a0), b = leaf(b0);
      std::vector<at::Tensor> input_grads;
      const StepCastCache step(bf16);
      for (int m = 0; m < 2; ++m) {
        const at::Tensor x = data("x" + std::to_string(m), {4, 5}).set_requires_grad(true);
        std::vector<at::Tensor> y;
        {
          const AutocastScope autocast(bf16);
          const at::Tensor w = fused_compute_weight({a, b}, x);
          EXPECT_EQ(w.defined(), bf16) << "a concatenated copy in bf16 only";
          if (fused && w.defined()) {
            y = at::linear(x, w).split_with_sizes({6, 2}, -1);
          } else {
            y = {at::linear(x, a), at::linear(x, b)};
          }
        }
        (y[0].to(at::kFloat).square().sum() + y[1].to(at::kFloat).sum()).backward();
        input_grads.push_back(x.grad());
      }
      return std::make_tuple(a.grad(), b.grad(), input_grads);
    };
    const auto [a_ref, b_ref, x_ref] = run(false);
    const auto [a_grad, b_grad, x_grad] = run(true);
    const double tol = bf16 ? 1e-2 : 1e-6;  // bf16: the fused GEMM may round its sums in another order
    EXPECT_TRUE(at::allclose(a_grad, a_ref, tol, tol)) << "bf16 " << bf16;
    EXPECT_TRUE(at::allclose(b_grad, b_ref, tol, tol)) << "bf16 " << bf16;
    for (size_t m = 0; m < x_ref.size(); ++m) EXPECT_TRUE(at::allclose(x_grad[m], x_ref[m], tol, tol)) << "bf16 " << bf16;
    EXPECT_EQ(a_grad.scalar_type(), at::kFloat);
  }
}

// The gradients through compute_weight's copies are autocast's own to the bit:
// three micro-batches of a bf16 linear, their weight and bias gradients added
// into the fp32 .grad, with a step cache and without one.
TEST(StepCastCache, GradientsGoStraightIntoTheFp32GradAsAutocastWouldAddThem) {
  const at::Tensor w0 = data("w", {6, 5}), b0 = data("b", {6});
  auto run = [&](bool through_compute_weight, bool step_cache) {
    at::Tensor w = leaf(w0), b = leaf(b0);
    const StepCastCache step(step_cache);
    for (int m = 0; m < 3; ++m) {
      const at::Tensor x = data("x" + std::to_string(m), {4, 5}), r = data("r" + std::to_string(m), {4, 6});
      at::Tensor y;
      {
        const AutocastScope autocast(true);
        y = through_compute_weight ? at::linear(x, compute_weight(w, x), compute_weight(b, x)) : at::linear(x, w, b);
      }
      (y.to(at::kFloat) * r).sum().backward();
    }
    return std::make_pair(w.grad(), b.grad());
  };
  const auto [w_ref, b_ref] = run(false, false);
  ASSERT_EQ(w_ref.scalar_type(), at::kFloat);
  for (const bool step_cache : {false, true}) {
    const auto [w_grad, b_grad] = run(true, step_cache);
    EXPECT_EQ(w_grad.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(w_grad, w_ref)) << "weight gradient, step cache " << step_cache;
    EXPECT_TRUE(at::equal(b_grad, b_ref)) << "bias gradient, step cache " << step_cache;
  }
}

// gemm_linear (tp/weight_grad.hpp), whose backward adds a copy's weight
// gradient into the fp32 .grad itself: on the CPU, where no GEMM adds into
// fp32, the same gradients as autocast's own linear to the bit (weight, bias
// and input; three micro-batches of a 3-D input through the step's copy).
TEST(GemmLinear, OnTheCpuGivesAutocastsOwnGradientsToTheBit) {
  EXPECT_TRUE(libtorch_has_fp32_output_gemms()) << "every LibTorch hetpar supports (2.11 to 2.15) should have aten::mm.dtype and aten::addmm.dtype_out";
  EXPECT_FALSE(gemm_adds_into_fp32(at::Device(at::kCPU))) << "the CPU's LibTorch refuses the form: a refusal is a no";
  const at::Tensor w0 = data("w", {6, 5}), b0 = data("b", {6});
  auto run = [&](bool through_gemm_linear) {
    at::Tensor w = leaf(w0), b = leaf(b0);
    std::vector<at::Tensor> input_grads;
    const StepCastCache step(true);
    for (int m = 0; m < 3; ++m) {
      const at::Tensor x = data("x" + std::to_string(m), {2, 4, 5}).set_requires_grad(true);
      const at::Tensor r = data("r" + std::to_string(m), {2, 4, 6});
      at::Tensor y;
      {
        const AutocastScope autocast(true);
        y = through_gemm_linear ? gemm_linear(x, gemm_weight(w, x), compute_weight(b, x)) : at::linear(x, w, b);
      }
      EXPECT_EQ(y.scalar_type(), at::kBFloat16);
      (y.to(at::kFloat) * r).sum().backward();
      input_grads.push_back(x.grad());
    }
    return std::make_tuple(w.grad(), b.grad(), input_grads);
  };
  const auto [w_ref, b_ref, x_ref] = run(false);
  const auto [w_grad, b_grad, x_grad] = run(true);
  EXPECT_EQ(w_grad.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(w_grad, w_ref)) << "weight gradient";
  EXPECT_TRUE(at::equal(b_grad, b_ref)) << "bias gradient";
  for (size_t m = 0; m < x_ref.size(); ++m) {
    EXPECT_EQ(x_grad[m].scalar_type(), at::kFloat) << "the input's gradient in the input's type";
    EXPECT_TRUE(at::equal(x_grad[m], x_ref[m])) << "input gradient, micro-batch " << m;
  }
  // Outside autocast the GEMM reads the weight itself and autograd makes its gradient.
  const at::Tensor w = leaf(w0), x = data("x", {4, 5});
  const GemmWeight plain = gemm_weight(w, x);
  EXPECT_TRUE(plain.value.is_same(w));
  EXPECT_TRUE(plain.into.empty());
}

// Through gemm_linear a trained weight's accumulation hook (the gradient
// buckets' signal, train/grad_reducer.hpp) still fires once a backward, and
// in a concatenated copy a frozen weight gets no gradient while its
// neighbour gets the rows of its own (against separate GEMMs, within bf16's
// rounding of the fused product).
TEST(GemmLinear, ACopysTrainedWeightsLandOnceABackwardAndFrozenOnesNever) {
  struct Count : torch::autograd::PostAccumulateGradHook {
    explicit Count(int* n) : n(n) {}
    void operator()(const torch::autograd::Variable&) override { ++*n; }
    int* n;
  };
  const at::Tensor a0 = data("a", {6, 5}), b0 = data("b", {2, 5});
  auto run = [&](bool fused, int* landed) {
    at::Tensor a = leaf(a0), b = b0.clone();  // b frozen
    torch::autograd::impl::set_post_acc_grad_hooks(a, std::make_unique<Count>(landed));
    const StepCastCache step(true);
    for (int m = 0; m < 2; ++m) {
      const at::Tensor x = data("x" + std::to_string(m), {4, 5});
      std::vector<at::Tensor> y;
      {
        const AutocastScope autocast(true);
        if (fused) {
          const std::optional<GemmWeight> w = fused_gemm_weight({a, b}, x);
          EXPECT_TRUE(w.has_value());
          EXPECT_EQ(w->into.size(), 2u) << "every weight of the copy, for their rows";
          y = gemm_linear(x, *w).split_with_sizes({6, 2}, -1);
        } else {
          y = {at::linear(x, a), at::linear(x, b)};
        }
      }
      (y[0].to(at::kFloat).square().sum() + y[1].to(at::kFloat).sum()).backward();
    }
    EXPECT_FALSE(b.grad().defined()) << "a frozen weight got a gradient";
    return a.grad();
  };
  int landed_ref = 0, landed = 0;
  const at::Tensor a_ref = run(false, &landed_ref), a_grad = run(true, &landed);
  EXPECT_EQ(landed_ref, 2);
  EXPECT_EQ(landed, 2) << "the trained weight's hook, once each of the 2 backwards";
  EXPECT_TRUE(at::allclose(a_grad, a_ref, 1e-2, 1e-2));
}

// hetpar's RMSNorm (model/norms.hpp) against ATen's on the CPU: the output
// and both gradients, with an fp32 input (1e-5 of the largest value) and a
// bf16 one (bf16's rounding, 2e-2); and what it keeps for its backward: a
// float a row beside its input, which the caller holds anyway (ATen's
// composed ops keep the normalised rows too: printed).
TEST(RmsNorm, MatchesTheLibrarysAndKeepsOnlyAScaleARow) {
  const int64_t rows = 96, hidden = 64;
  const double eps = 1e-5;
  at::manual_seed(7);
  const at::Tensor x0 = at::randn({2, rows / 2, hidden}), w0 = 1 + 0.1 * at::randn({hidden}), dy = at::randn({2, rows / 2, hidden});
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    const double rtol = type == at::kFloat ? 1e-5 : 2e-2;
    auto leaf_of = [](const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); };
    const at::Tensor x = leaf_of(x0.to(type)), w = leaf_of(w0), xr = leaf_of(x0.to(type)), wr = leaf_of(w0);
    const at::Tensor y = rms_norm(x, w, eps), yr = at::rms_norm(xr, {hidden}, wr, eps);
    ASSERT_EQ(y.scalar_type(), yr.scalar_type());
    y.backward(dy.to(type));
    yr.backward(dy.to(type));
    auto close = [&](const at::Tensor& got, const at::Tensor& want, const char* what) {
      const double scale = want.to(at::kFloat).abs().max().item<double>();
      EXPECT_LE((got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<double>(), rtol * scale)
          << what << " " << c10::toString(type);
    };
    close(y, yr, "output");
    close(x.grad(), xr.grad(), "input gradient");
    close(w.grad(), wr.grad(), "weight gradient");
  }
  ASSERT_TRUE(install_cpu_tensor_counter());
  const at::Tensor x = at::randn({rows, hidden}).set_requires_grad(true), w = w0.detach().clone().set_requires_grad(true);
  auto kept_beside_output = [&](const auto& norm) {
    const size_t before = cpu_tensor_bytes_in_use();
    const at::Tensor y = norm();
    return cpu_tensor_bytes_in_use() - before - y.nbytes();
  };
  EXPECT_EQ(kept_beside_output([&] { return rms_norm(x, w, eps); }), rows * sizeof(float));
  std::printf("kept for the backward beside the output: hetpar's %zu B, ATen's %zu B (the input: %zu B)\n",
              kept_beside_output([&] { return rms_norm(x, w, eps); }),
              kept_beside_output([&] { return at::rms_norm(x, {hidden}, w, eps); }), x.nbytes());
}

// The norms of a bf16 residual stream on the CPU (tests/norm_checks.hpp).
TEST(Norms, ABf16InputStaysBf16UnderAutocastWithFp32WeightGradients) { test::expect_bf16_norms_match_fp32(at::kCPU); }

TEST(Rope, OneFunctionMatchesTheRotateHalfFormula) { EXPECT_TRUE(all_ranks_succeeded(run_workers("rope", 1))); }

INSTANTIATE_TEST_SUITE_P(Tp, TpLayers, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

}  // namespace
}  // namespace hetpar::test
