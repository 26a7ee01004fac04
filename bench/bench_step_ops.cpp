// Microbenchmark of four pieces of a training step, each beside the way it was
// done before, in one process on one thread (CPU):
//
//   loss/<path>/<dtype>   the summed cross-entropy over [tokens, vocab] logits,
//                         forward + backward: `vocab_parallel` is the
//                         vocab-parallel function on a group of one (what a
//                         TP-1 rank ran before), `log_softmax` is
//                         cross_entropy_sum's one-rank path (what it runs now).
//   casts/<when>          forward + backward of a stack of bf16 linear layers
//                         (fp32 weights, few tokens) over several micro-batches:
//                         `autocast_alone` casts every weight in every
//                         micro-batch and sends each gradient through a cast
//                         and an add (before), `once_per_step` casts once a
//                         step and adds the bf16 gradients straight into the
//                         fp32 .grad (tp/weight_cast.hpp, now).
//   embedding/<backward>  a step's micro-batches of a [vocab, hidden] fp32
//                         table's lookups, forward + backward: `dense` is the
//                         library's embedding, whose backward writes a dense
//                         gradient of the table that autograd adds into .grad
//                         (before), `rows_into_grad` is VocabParallelEmbedding
//                         on one rank, which adds the looked-up rows'
//                         gradients into .grad in place (now).
//   rms_norm/<impl>       an RMSNorm over [tokens, table_hidden] fp32 rows,
//                         forward + backward: `library` is ATen's rms_norm,
//                         composed of ops on the CPU, which keeps the
//                         normalised rows for its backward (before),
//                         `saves_input` is model/norms.hpp's function, which
//                         recomputes them there (now).
//
// Before timing, each pair is checked to compute the same thing: the two
// losses and their logit gradients within fp32 rounding, the two cast modes'
// weight gradients equal to the bit, the two tables' gradients within fp32
// rounding (the sums over micro-batches associate differently), the two
// norms' outputs and gradients within fp32 rounding. `--smoke`
// runs every benchmark once on small shapes (ctest: bench_step_ops_smoke).
// The figures that matter are the ratios within a pair, printed by the same
// run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/group.hpp"
#include "model/norms.hpp"
#include "tp/vocab_parallel.hpp"
#include "tp/weight_cast.hpp"
#include "tp/weight_grad.hpp"
#include "model/autocast_scope.hpp"
#include "util/exit_codes.hpp"

namespace hetpar::bench {
namespace {

struct Shapes {
  int64_t tokens = 2048, vocab = 32000;  // the loss
  int64_t hidden = 1024, layers = 4;     // the linear stack
  int64_t block_tokens = 16, micro_batches = 8;
  int64_t table_hidden = 1024;  // the embedding: vocab x this, `tokens` ids a micro-batch
};
Shapes g_shapes;

Group& one_rank() {
  static Group group("bench", {0}, 0, nullptr, std::chrono::milliseconds(60'000));
  return group;
}

// ---- the loss -----------------------------------------------------------------

struct LossInputs {
  at::Tensor logits, targets;
};

LossInputs loss_inputs(at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  LossInputs in;
  in.logits = (3 * at::randn({g_shapes.tokens, g_shapes.vocab}, gen, at::TensorOptions(at::kFloat))).to(dtype);
  in.targets = at::randint(g_shapes.vocab, {g_shapes.tokens}, gen, at::TensorOptions(at::kLong));
  in.targets.narrow(0, 0, g_shapes.tokens / 8).fill_(-100);  // some positions carry no loss
  return in;
}

// Forward + backward; returns the loss and the logits' gradient.
std::pair<at::Tensor, at::Tensor> run_loss(bool vocab_parallel, const LossInputs& in) {
  const at::Tensor logits = in.logits.detach().requires_grad_(true);
  const at::Tensor loss = vocab_parallel ? vocab_parallel_cross_entropy(logits.to(at::kFloat), in.targets, one_rank()).sum()
                                         : cross_entropy_sum(logits, in.targets, one_rank());
  loss.backward();
  return {loss.detach(), logits.grad()};
}

void check_losses_agree(at::ScalarType dtype) {
  const LossInputs in = loss_inputs(dtype);
  const auto [old_loss, old_grad] = run_loss(true, in);
  const auto [new_loss, new_grad] = run_loss(false, in);
  const double loss_diff = (old_loss - new_loss).abs().item<double>() / old_loss.abs().item<double>();
  const double grad_diff = (old_grad.to(at::kFloat) - new_grad.to(at::kFloat)).abs().max().item<double>() /
                           old_grad.to(at::kFloat).abs().max().item<double>();
  // fp32 sums in different orders; a bf16 gradient may round the other way.
  const double grad_tolerance = dtype == at::kFloat ? 1e-5 : 1e-2;
  if (loss_diff > 1e-5 || grad_diff > grad_tolerance) {
    throw std::runtime_error("the two losses disagree: relative loss difference " + std::to_string(loss_diff) +
                             ", gradient " + std::to_string(grad_diff));
  }
}

void BM_Loss(benchmark::State& state, bool vocab_parallel, at::ScalarType dtype) {
  const LossInputs in = loss_inputs(dtype);
  for (auto _ : state) benchmark::DoNotOptimize(run_loss(vocab_parallel, in));
  state.counters["logits"] = static_cast<double>(g_shapes.tokens * g_shapes.vocab);
}

// ---- the weight casts -----------------------------------------------------------

// A stack of bf16 linear layers with SiLU between them, its fp32 weights
// trained: few tokens, so the weights' traffic is a visible part of the step.
struct Stack {
  std::vector<at::Tensor> weights;
  at::Tensor input;
};

Stack make_stack() {
  Stack s;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto fp32 = at::TensorOptions(at::kFloat);
  for (int64_t i = 0; i < g_shapes.layers; ++i) {
    s.weights.push_back((at::randn({g_shapes.hidden, g_shapes.hidden}, gen, fp32) * 0.03).set_requires_grad(true));
  }
  s.input = at::randn({g_shapes.block_tokens, g_shapes.hidden}, gen, fp32);
  return s;
}

// One step's micro-batches, forward under autocast and backward outside it,
// as training runs them: `step_casts` through gemm_linear on the step's copy
// inside a StepCastCache (now; on the CPU its gradient is made in bf16 and
// added, no GEMM here adds into fp32), otherwise autocast's own casts (before).
void run_step(Stack& s, bool step_casts) {
  for (const at::Tensor& w : s.weights) w.mutable_grad() = at::Tensor();
  const StepCastCache casts(step_casts);
  for (int64_t m = 0; m < g_shapes.micro_batches; ++m) {
    at::Tensor x = s.input;
    {
      const AutocastScope autocast(true);
      for (const at::Tensor& w : s.weights) {
        x = at::silu(step_casts ? gemm_linear(x, gemm_weight(w, x)) : at::linear(x, w));
      }
    }
    x.to(at::kFloat).square().mean().backward();
  }
}

void check_casts_agree() {
  Stack s = make_stack();
  std::vector<at::Tensor> grads[2];
  for (int now = 0; now < 2; ++now) {
    run_step(s, now == 1);
    for (const at::Tensor& w : s.weights) grads[now].push_back(w.grad().clone());
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    if (!at::equal(grads[0][i], grads[1][i])) throw std::runtime_error("the two cast modes' weight gradients differ");
  }
}

void BM_Casts(benchmark::State& state, bool step_casts) {
  Stack s = make_stack();
  for (auto _ : state) run_step(s, step_casts);
  state.counters["weights"] = static_cast<double>(g_shapes.layers * g_shapes.hidden * g_shapes.hidden);
  state.counters["micro_batches"] = static_cast<double>(g_shapes.micro_batches);
}

// ---- the embedding's gradient -----------------------------------------------------

struct Lookups {
  std::unique_ptr<VocabParallelEmbedding> layer;  // its weight is the table
  std::vector<at::Tensor> ids, upstream;          // a micro-batch's ids and rows' gradient
};

Lookups make_lookups() {
  Lookups l;
  l.layer = std::make_unique<VocabParallelEmbedding>("bench.embed", g_shapes.vocab, g_shapes.table_hidden, 5, 0.02,
                                                     one_rank());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(13);
  for (int64_t m = 0; m < g_shapes.micro_batches; ++m) {
    l.ids.push_back(at::randint(g_shapes.vocab, {g_shapes.tokens}, gen, at::TensorOptions(at::kLong)));
    l.upstream.push_back(at::randn({g_shapes.tokens, g_shapes.table_hidden}, gen, at::TensorOptions(at::kFloat)));
  }
  return l;
}

void run_lookups(Lookups& l, bool rows_into_grad) {
  const at::Tensor& table = l.layer->weight;
  table.mutable_grad() = at::Tensor();
  for (size_t m = 0; m < l.ids.size(); ++m) {
    const at::Tensor rows = rows_into_grad ? l.layer->forward(l.ids[m]) : at::embedding(table, l.ids[m]);
    rows.backward(l.upstream[m]);
  }
}

void check_embeddings_agree() {
  Lookups l = make_lookups();
  run_lookups(l, false);
  const at::Tensor dense = l.layer->weight.grad().clone();
  run_lookups(l, true);
  const double diff = (dense - l.layer->weight.grad()).abs().max().item<double>() / dense.abs().max().item<double>();
  if (diff > 1e-6) throw std::runtime_error("the two embedding gradients disagree: " + std::to_string(diff));
}

void BM_Embedding(benchmark::State& state, bool rows_into_grad) {
  Lookups l = make_lookups();
  for (auto _ : state) run_lookups(l, rows_into_grad);
  state.counters["table"] = static_cast<double>(g_shapes.vocab * g_shapes.table_hidden);
  state.counters["micro_batches"] = static_cast<double>(g_shapes.micro_batches);
}

struct NormRows {
  at::Tensor x, weight, upstream;
};

NormRows make_norm_rows() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(17);
  const auto f32 = at::TensorOptions(at::kFloat);
  return {at::randn({g_shapes.tokens, g_shapes.table_hidden}, gen, f32).set_requires_grad(true),
          (1 + 0.1 * at::randn({g_shapes.table_hidden}, gen, f32)).set_requires_grad(true),
          at::randn({g_shapes.tokens, g_shapes.table_hidden}, gen, f32)};
}

at::Tensor run_norm(NormRows& n, bool saves_input) {
  n.x.mutable_grad() = at::Tensor();
  n.weight.mutable_grad() = at::Tensor();
  at::Tensor y = saves_input ? rms_norm(n.x, n.weight, 1e-5) : at::rms_norm(n.x, {n.x.size(-1)}, n.weight, 1e-5);
  y.backward(n.upstream);
  return y.detach();
}

void check_norms_agree() {
  NormRows n = make_norm_rows();
  const at::Tensor y_library = run_norm(n, false), dx = n.x.grad().clone(), dw = n.weight.grad().clone();
  const at::Tensor y = run_norm(n, true);
  auto relative = [](const at::Tensor& a, const at::Tensor& b) { return ((a - b).abs().max() / b.abs().max()).item<double>(); };
  const double diff = std::max({relative(y, y_library), relative(n.x.grad(), dx), relative(n.weight.grad(), dw)});
  if (diff > 1e-5) throw std::runtime_error("the two RMSNorms disagree: " + std::to_string(diff));
}

void BM_RmsNorm(benchmark::State& state, bool saves_input) {
  NormRows n = make_norm_rows();
  for (auto _ : state) run_norm(n, saves_input);
  state.counters["rows"] = static_cast<double>(g_shapes.tokens);
}

void register_all(bool smoke) {
  auto add = [&](benchmark::internal::Benchmark* bm) {
    bm->Unit(benchmark::kMillisecond)->UseRealTime();
    if (smoke) bm->Iterations(1);
  };
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::string name = dtype == at::kFloat ? "fp32" : "bf16";
    add(benchmark::RegisterBenchmark(("loss/vocab_parallel/" + name).c_str(), BM_Loss, true, dtype));
    add(benchmark::RegisterBenchmark(("loss/log_softmax/" + name).c_str(), BM_Loss, false, dtype));
  }
  add(benchmark::RegisterBenchmark("casts/autocast_alone", BM_Casts, false));
  add(benchmark::RegisterBenchmark("casts/once_per_step", BM_Casts, true));
  add(benchmark::RegisterBenchmark("embedding/dense", BM_Embedding, false));
  add(benchmark::RegisterBenchmark("embedding/rows_into_grad", BM_Embedding, true));
  add(benchmark::RegisterBenchmark("rms_norm/library", BM_RmsNorm, false));
  add(benchmark::RegisterBenchmark("rms_norm/saves_input", BM_RmsNorm, true));
}

}  // namespace
}  // namespace hetpar::bench

int main(int argc, char** argv) {
  using namespace hetpar::bench;
  bool smoke = false;
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
    } else if (a.rfind("--benchmark_", 0) == 0) {
      args.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "bench_step_ops: unknown argument %s (--smoke, --benchmark_*)\n", a.c_str());
      return hetpar::kExitConfigError;
    }
  }
  if (smoke) g_shapes = Shapes{64, 1000, 64, 2, 16, 2, 32};
  at::set_num_threads(1);
  try {
    check_losses_agree(at::kFloat);
    check_losses_agree(at::kBFloat16);
    check_casts_agree();
    check_embeddings_agree();
    check_norms_agree();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step_ops: check failed before timing: %s\n", e.what());
    return 1;
  }
  register_all(smoke);
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
