#include "plan/calibration.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>

#include "model/llama.hpp"
#include "model/rope.hpp"
#include "model/vision_encoder.hpp"
#include "plan/alpha_beta_fit.hpp"

namespace hetpar {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A GPU only queues work: its timings start and end on an idle device.
void sync(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

// How repeated timings of one thing become its figure: a primitive takes
// the fastest of three, since a shared machine only ever adds time; what a
// step's median sees the median: of five for a whole layer or a collective
// amid compute, of fifteen for ranks sharing cores (below).
enum class Trials { kFastest, kTypical, kTypicalOfMany };
int trial_count(Trials kind) { return kind == Trials::kFastest ? 3 : kind == Trials::kTypical ? 5 : 15; }
double pick(std::vector<double> seconds, Trials kind) {
  std::sort(seconds.begin(), seconds.end());
  return kind == Trials::kFastest ? seconds.front() : seconds[seconds.size() / 2];
}

// Seconds per call of FN: one warm-up call, then trials of calls for
// `seconds_per_point` each (four times that when typical; one call when it
// takes longer), each trial's mean, picked as `kind` says.
double seconds_per_call(const std::function<void()>& fn, const CalibrationOptions& o,
                        Trials kind = Trials::kFastest) {
  fn();
  const double seconds = kind == Trials::kFastest ? o.seconds_per_point : 4 * o.seconds_per_point;
  std::vector<double> means;
  for (int trial = 0; trial < trial_count(kind); ++trial) {
    int calls = 0;
    sync(o.device);
    const auto start = Clock::now();
    do {
      fn();
      ++calls;
      if (calls % 8 == 0) sync(o.device);  // the host must not run far ahead of what it times
    } while (since(start) < seconds);
    sync(o.device);
    means.push_back(since(start) / calls);
  }
  return pick(std::move(means), kind);
}

at::TensorOptions on(const CalibrationOptions& o) { return at::TensorOptions(o.dtype()).device(o.device); }

std::vector<int64_t> sizes(bool quick, std::vector<int64_t> quick_set, std::vector<int64_t> full_set) {
  return quick ? quick_set : full_set;
}

}  // namespace

// A linear layer's three GEMMs as the trainer's autograd calls them, on rows
// x [m, k] and a weight W [n, k]: forward y = x W^T, backward dx = dy W and
// dW^T = x^T dy. Each call takes the next operands of a pool larger than a
// core's caches: in a step every matmul reads activations and weights that
// other ops have since pushed out, and a benchmark that reuses one hot
// operand set measured 10-25 % faster than training ran the same shapes.
nlohmann::json measure_gemm(const CalibrationOptions& o) {
  nlohmann::json out = nlohmann::json::array();
  const bool gpu = o.device.is_cuda();
  const std::vector<int64_t> dims = gpu ? sizes(o.quick, {256, 2048}, {256, 1024, 4096, 8192})
                                        : sizes(o.quick, {64, 256}, {64, 256, 1024});
  constexpr double kPoolBytes = 64 << 20;
  for (int64_t m : dims) {
    for (int64_t n : dims) {
      for (int64_t k : dims) {
        const double set_bytes = static_cast<double>(c10::elementSize(o.dtype()) * (2 * m * k + 2 * m * n + n * k));
        const int sets = static_cast<int>(std::clamp(std::ceil(kPoolBytes / set_bytes), 1.0, o.quick ? 4.0 : 64.0));
        struct Operands { at::Tensor x, w, dy, y, dx, dw; };
        std::vector<Operands> pool;
        for (int i = 0; i < sets; ++i) {
          pool.push_back({at::rand({m, k}, on(o)), at::rand({n, k}, on(o)), at::rand({m, n}, on(o)),
                          at::empty({m, n}, on(o)), at::empty({m, k}, on(o)), at::empty({k, n}, on(o))});
        }
        size_t next = 0;
        const auto take = [&]() -> Operands& { return pool[next++ % pool.size()]; };
        const double forward = seconds_per_call(
            [&] {
              Operands& t = take();
              at::mm_out(t.y, t.x, t.w.t());
            },
            o);
        const double backward = seconds_per_call(
            [&] {
              Operands& t = take();
              at::mm_out(t.dx, t.dy, t.w);
              at::mm_out(t.dw, t.x.t(), t.dy);
            },
            o);
        const double flops = 2.0 * m * n * k;
        out.push_back({{"m", m}, {"n", n}, {"k", k}, {"flops_per_second", flops / forward},
                       {"backward_flops_per_second", 2 * flops / backward}});
      }
    }
  }
  return out;
}

nlohmann::json measure_attention(const CalibrationOptions& o) {
  nlohmann::json out = nlohmann::json::array();
  const bool gpu = o.device.is_cuda();
  const int64_t kHeads = gpu ? 16 : 4;
  // The trainer's two calls: all heads their own keys (the encoder; a fused
  // kernel on CPU), and grouped-query heads, two to a key head (the LLM; on
  // CPU an unfused path, much slower at the same FLOPs). Sequences from an
  // image's patches to a long text.
  const auto measure = [&](int64_t seq, int64_t d, bool causal, int64_t kv_heads) {
    // A GPU gets a batch of 16k tokens, about a micro-batch of real work.
    const int64_t batch = gpu ? std::max<int64_t>(1, 16384 / seq) : 1;
    const at::Tensor q = at::randn({batch, kHeads, seq, d}, on(o)).requires_grad_();
    const at::Tensor k = at::randn({batch, kv_heads, seq, d}, on(o)).requires_grad_();
    const at::Tensor v = at::randn({batch, kv_heads, seq, d}, on(o)).requires_grad_();
    const at::Tensor grad = at::randn({batch, kHeads, seq, d}, on(o));
    const bool grouped = kv_heads != kHeads;
    const auto call = [&] { return at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal, std::nullopt, grouped); };
    const double forward = seconds_per_call(
        [&] {
          at::NoGradGuard no_grad;
          call();
        },
        o);
    const double both = seconds_per_call([&] { call().backward(grad); }, o);
    // Q K^T and P V: 2 matmuls of seq x seq x d per head, halved when causal.
    const double flops = 4.0 * batch * kHeads * seq * seq * d * (causal ? 0.5 : 1.0);
    out.push_back({{"batch", batch}, {"heads", kHeads}, {"kv_heads", kv_heads}, {"seq", seq}, {"head_dim", d},
                   {"causal", causal}, {"forward_seconds", forward},
                   {"backward_seconds", std::max(both - forward, 0.0)},
                   {"forward_flops_per_second", flops / forward}});
  };
  const std::vector<int64_t> seqs = gpu ? sizes(o.quick, {256, 1024}, {256, 576, 1024, 2048, 4096, 8192})
                                        : sizes(o.quick, {64, 256}, {64, 128, 512, 1024});
  for (int64_t seq : seqs) {
    for (int64_t d : gpu ? sizes(o.quick, {64}, {64, 128}) : sizes(o.quick, {32}, {32, 64, 128})) {
      for (bool causal : {true, false}) measure(seq, d, causal, kHeads);
      measure(seq, d, true, kHeads / 2);
    }
  }
  return out;
}

nlohmann::json measure_memory_bound(const CalibrationOptions& o) {
  nlohmann::json out = nlohmann::json::array();
  const bool gpu = o.device.is_cuda();
  const int64_t kHidden = gpu ? 4096 : 256;
  const std::vector<int64_t> counts = gpu ? sizes(o.quick, {1 << 20}, {1 << 20, 1 << 23, 1 << 26, 1 << 28})
                                          : sizes(o.quick, {1 << 16}, {1 << 16, 1 << 20, 1 << 23});
  for (int64_t elements : counts) {
    const at::Tensor x = at::randn({elements / kHidden, kHidden}, on(o)), y = at::randn({elements / kHidden, kHidden}, on(o));
    const at::Tensor w = at::ones({kHidden}, on(o)), b = at::zeros({kHidden}, on(o));
    at::Tensor z = at::empty_like(x);
    const double bytes_in = static_cast<double>(c10::elementSize(o.dtype()) * elements);
    // Each op with the bytes it must move: inputs read once, output written once.
    const std::vector<std::tuple<const char*, double, std::function<void()>>> ops = {
        {"add", 3 * bytes_in, [&] { at::add_out(z, x, y); }},
        {"gelu", 2 * bytes_in, [&] { at::gelu_out(z, x, "tanh"); }},
        {"rms_norm", 2 * bytes_in, [&] { z = at::rms_norm(x, {kHidden}, w, 1e-5); }},
        {"layer_norm", 2 * bytes_in, [&] { z = at::layer_norm(x, {kHidden}, w, b, 1e-6); }}};
    for (const auto& [name, bytes, fn] : ops) {
      const double s = seconds_per_call(fn, o);
      out.push_back({{"op", name}, {"elements", elements}, {"bytes", bytes}, {"bytes_per_second", bytes / s}});
    }
  }
  return out;
}

nlohmann::json measure_layers(const CalibrationOptions& o) {
  nlohmann::json out = nlohmann::json::array();
  if (o.device.is_cuda()) return out;
  Group alone("calibrate.layer", {0}, 0, nullptr, std::chrono::minutes(1));  // TP 1: every call local
  // Forward as training runs it (the graph kept for a backward), then both;
  // the backward is the difference. A micro-batch runs every layer of a
  // stack once: each layer's weights come from memory rather than a cache
  // one layer repeated keeps warm, and its backward reads what its forward
  // saved a stack earlier. So `depth` distinct layers run in sequence, and a
  // layer takes their time over the depth.
  const auto time_layer = [&](nlohmann::json entry, const at::Tensor& x, int64_t depth,
                              const std::function<at::Tensor()>& forward) {
    const at::Tensor grad = at::randn_like(x);
    const double f = seconds_per_call([&] { forward(); }, o, Trials::kTypical) / depth;
    const double both = seconds_per_call([&] { forward().backward(grad); }, o, Trials::kTypical) / depth;
    entry["forward_seconds"] = f;
    entry["backward_seconds"] = std::max(both - f, 0.0);
    entry["stack_depth"] = depth;
    return entry;
  };
  // Layers enough for 64 MiB of fp32 weights (twice the cache of a CPU
  // like this one's), at most 32.
  const auto stack_depth = [&](double weights) {
    return o.quick ? int64_t{2} : std::clamp<int64_t>(static_cast<int64_t>(std::ceil((64 << 20) / (4 * weights))), 1, 32);
  };
  // Shapes on either side of the CPU workloads' (hidden 64-512), not at them.
  struct LlmShape { int64_t batch, seq, hidden, heads, kv_heads, ffn; };
  const std::vector<LlmShape> llm = o.quick ? std::vector<LlmShape>{{2, 32, 64, 4, 2, 128}}
                                            : std::vector<LlmShape>{{4, 128, 128, 4, 2, 352}, {2, 512, 512, 8, 4, 1408}};
  for (const LlmShape& s : llm) {
    LlmConfig c;
    c.hidden = s.hidden, c.heads = s.heads, c.kv_heads = s.kv_heads, c.ffn_hidden = s.ffn, c.seq_len = s.seq;
    const int64_t head_dim = s.hidden / s.heads;
    const double weights = double(s.hidden) * double(2 * s.hidden + 2 * s.kv_heads * head_dim + 3 * s.ffn);
    std::vector<std::unique_ptr<LlamaBlock>> stack;
    for (int64_t i = stack_depth(weights); i > 0; --i) {
      stack.push_back(std::make_unique<LlamaBlock>(c, "calibrate" + std::to_string(i), 1234 + i, alone, nullptr));
    }
    const auto [cos, sin] = rope_tables(s.seq, head_dim, c.rope_theta);
    const at::Tensor x = at::randn({s.batch, s.seq, s.hidden}).requires_grad_();
    out.push_back(time_layer({{"module", "llm"}, {"sequences", s.batch}, {"seq", s.seq}, {"hidden", s.hidden},
                              {"heads", s.heads}, {"kv_heads", s.kv_heads}, {"mlp", s.ffn}},
                             x, static_cast<int64_t>(stack.size()), [&] {
                               at::Tensor h = x;
                               for (const auto& block : stack) h = block->forward(h, cos, sin);
                               return h;
                             }));
  }
  struct EncoderShape { int64_t images, patches, hidden, heads, mlp; };
  const std::vector<EncoderShape> encoder = o.quick ? std::vector<EncoderShape>{{2, 16, 64, 4, 256}}
                                                    : std::vector<EncoderShape>{{8, 64, 96, 3, 384}, {4, 64, 512, 8, 2048}};
  for (const EncoderShape& s : encoder) {
    EncoderConfig c;
    c.hidden = s.hidden, c.heads = s.heads, c.mlp_hidden = s.mlp;
    std::vector<std::unique_ptr<VitBlock>> stack;
    for (int64_t i = stack_depth(double(s.hidden) * double(4 * s.hidden + 2 * s.mlp)); i > 0; --i) {
      stack.push_back(std::make_unique<VitBlock>(c, "calibrate" + std::to_string(i), 1234 + i, alone));
    }
    const at::Tensor x = at::randn({s.images, s.patches, s.hidden}).requires_grad_();
    out.push_back(time_layer({{"module", "encoder"}, {"sequences", s.images}, {"seq", s.patches}, {"hidden", s.hidden},
                              {"heads", s.heads}, {"kv_heads", s.heads}, {"mlp", s.mlp}},
                             x, static_cast<int64_t>(stack.size()), [&] {
                               at::Tensor h = x;
                               for (const auto& block : stack) h = block->forward(h);
                               return h;
                             }));
  }
  return out;
}

nlohmann::json measure_shared_cores(Runtime& runtime, int cores) {
  const int ranks = runtime.world_size();
  const at::Tensor a = at::randn({256, 256}), b = at::randn({256, 256});
  const at::Tensor x = at::randn({1 << 20}), y = at::randn({1 << 20});
  const auto block = [&] {  // about 6 ms here: GEMMs and elementwise ops with fresh outputs, as a layer makes them
    for (int i = 0; i < 16; ++i) {
      const at::Tensor c = at::mm(a, b);
      if (i % 4 == 0) at::add(x, y).mul_(0.5);
    }
  };
  // The typical round, each from a common barrier to the last rank done.
  // The scheduler's turns make a round's time swing: rounds of 4 blocks put
  // the efficiency anywhere from 77 to 92 % over nine calibrations in a
  // row; fifteen rounds of 16 blocks (1.5 s in all here), 82-87 % over three.
  const auto rounds = [&](bool everyone) {
    std::vector<double> seconds;
    for (int round = 0; round < trial_count(Trials::kTypicalOfMany); ++round) {
      runtime.world().barrier();
      const auto start = Clock::now();
      if (everyone || runtime.rank() == 0) {
        for (int i = 0; i < 16; ++i) block();
      }
      at::Tensor slowest = at::full({1}, since(start), at::kDouble);
      runtime.world().all_reduce(slowest, ReduceOp::kMax);
      seconds.push_back(slowest.item<double>());
    }
    return pick(std::move(seconds), Trials::kTypicalOfMany);
  };
  block();  // warm-up
  const double alone = rounds(false);
  const double all = rounds(true);
  const double ideal = alone * std::max(1.0, static_cast<double>(ranks) / cores);
  return {{"ranks", ranks}, {"cores", cores}, {"alone_seconds", alone}, {"all_ranks_seconds", all},
          {"efficiency", std::min(1.0, ideal / all)}};
}

std::vector<int> calibration_group_sizes(int world) {
  std::vector<int> out;
  for (int g = 2; g < world; g *= 2) out.push_back(g);
  if (world >= 2) out.push_back(world);
  return out;
}

nlohmann::json measure_collectives(Runtime& runtime, const CalibrationOptions& o) {
  const int world = runtime.world_size(), me = runtime.rank();
  std::vector<GroupSpec> specs;
  for (int g : calibration_group_sizes(world)) {
    std::vector<int> ranks(g);
    for (int r = 0; r < g; ++r) ranks[r] = r;
    specs.push_back({"calibrate." + std::to_string(g), ranks});
  }
  runtime.create_groups(specs);
  const int calls = o.quick ? 3 : 10;
  const std::vector<int64_t> message_bytes =
      o.device.is_cuda() ? sizes(o.quick, {1 << 20, 64 << 20}, {64 << 10, 1 << 20, 16 << 20, 256 << 20})
                         : sizes(o.quick, {16 << 10, 1 << 20}, {4 << 10, 64 << 10, 1 << 20, 8 << 20});
  nlohmann::json out = nlohmann::json::array();
  // Seconds of one `body` on the group: every rank takes part in the barriers
  // and the max, members run it. A batch takes as long as its slowest member.
  // Back to back the fastest batch counts; in context the typical one, since
  // there the waits are the point (below).
  const auto time_calls = [&](bool member, Trials kind, const std::function<void()>& body) {
    if (member) body();  // warm-up
    std::vector<double> batches;
    for (int batch = 0; batch < trial_count(kind); ++batch) {
      sync(o.device);
      runtime.world().barrier();
      double seconds = 0;
      if (member) {
        const auto start = Clock::now();
        for (int i = 0; i < calls; ++i) body();
        sync(o.device);
        seconds = since(start) / calls;
      }
      at::Tensor slowest = at::full({1}, seconds, at::TensorOptions(at::kDouble).device(o.device));
      runtime.world().all_reduce(slowest, ReduceOp::kMax);
      batches.push_back(slowest.item<double>());
    }
    return pick(std::move(batches), kind);
  };
  // In training a collective sits between compute on every rank: the ranks
  // arrive apart (whatever delayed one rank's compute delays them all) and
  // the communication threads wait for a core. In context, each call follows
  // 16 GEMMs of 256^3 (3-4 ms on this CPU, about a small layer's work
  // between two all-reduces), and the typical cost of the pair less the
  // GEMMs' own (timed the same way) is the collective's: the fastest batch
  // said 1.75 ms for a 1 MiB TP2 all-reduce that took 2.6 ms (median) in a
  // training step.
  const at::Tensor a = at::randn({256, 256}, on(o)), b = at::randn({256, 256}, on(o));
  at::Tensor c = at::empty({256, 256}, on(o));
  const auto compute = [&] {
    for (int i = 0; i < 16; ++i) at::mm_out(c, a, b);
  };
  const auto fit_into = [](nlohmann::json& entry, const std::vector<std::pair<double, double>>& points,
                           const std::string& prefix) {
    for (const auto& [bytes, seconds] : points) entry[prefix + "points"].push_back({{"bytes", bytes}, {"seconds", seconds}});
    try {
      const AlphaBeta fit = fit_alpha_beta(points);
      entry[prefix + "latency_seconds"] = fit.latency_seconds;
      entry[prefix + "bytes_per_second"] = fit.bytes_per_second;
    } catch (const std::invalid_argument& e) {
      entry[prefix + "fit_error"] = e.what();  // noise swamped the sizes: the points stand alone
    }
  };
  // The ranks' compute drifts apart in proportion to its length, and the
  // next collective waits for the last of them: a small all-reduce after 4
  // times the GEMMs (`compute_alone` of them alone), less the same after the
  // usual ones, over the extra compute. Two calibrations here said 0.011 and
  // 0.047 s a second of compute over 2 ranks (a difference of noisy figures).
  const auto skew_per_compute_second = [&](bool member, Group* group, double short_alone) {
    const at::Tensor small = at::randn({256, 64}, on(o));  // 64 KiB
    const auto call = [&] {
      at::Tensor t = small.clone();
      group->all_reduce(t);
    };
    const auto compute_long = [&] {
      for (int i = 0; i < 4; ++i) compute();
    };
    const double long_alone = time_calls(member, Trials::kTypical, compute_long);
    const double after_short = time_calls(member, Trials::kTypical, [&] {
      compute();
      call();
    }) - short_alone;
    const double after_long = time_calls(member, Trials::kTypical, [&] {
      compute_long();
      call();
    }) - long_alone;
    return long_alone > short_alone ? std::max(0.0, (after_long - after_short) / (long_alone - short_alone)) : 0.0;
  };
  for (const GroupSpec& spec : specs) {
    const int g = static_cast<int>(spec.ranks.size());
    const bool member = me < g;
    Group* group = member ? &runtime.group(spec.ranks) : nullptr;
    const double compute_alone = time_calls(member, Trials::kTypical, compute);
    std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all_v"};
    if (g == 2) ops.push_back("send_recv");
    for (const std::string& op : ops) {
      std::vector<std::pair<double, double>> points, in_context;
      for (int64_t bytes : message_bytes) {
        const int64_t rows = std::max<int64_t>(1, bytes / 4 / 64 / g) * g;  // [rows, 64] floats, rows divisible by g
        const at::Tensor full = at::randn({rows, 64}, at::TensorOptions(at::kFloat).device(o.device));
        std::function<void()> call;
        if (op == "all_reduce") {
          call = [&] {
            at::Tensor t = full.clone();
            group->all_reduce(t);
          };
        } else if (op == "all_gather") {
          const at::Tensor part = full.narrow(0, 0, rows / g).contiguous();
          call = [&, part] { group->all_gather(part); };
        } else if (op == "reduce_scatter") {
          call = [&] { group->reduce_scatter(full); };
        } else if (op == "all_to_all_v") {
          const std::vector<int64_t> counts(g, rows / g);
          call = [&, counts] { group->all_to_all_v(full, counts, counts); };
        } else {
          call = [&] {
            at::Tensor t = full.clone();
            if (group->rank() == 0) group->send(t, 1);
            else group->recv(t, 0);
          };
        }
        const double message = static_cast<double>(rows * 64 * 4);
        points.emplace_back(message, time_calls(member, Trials::kFastest, call));
        const double with_compute = time_calls(member, Trials::kTypical, [&] {
          compute();
          call();
        });
        in_context.emplace_back(message, std::max(0.0, with_compute - compute_alone));
      }
      nlohmann::json entry = {{"op", op}, {"group_size", g}, {"calls_per_point", calls}};
      fit_into(entry, points, "");
      fit_into(entry, in_context, "in_context_");
      if (op == "all_reduce") {
        entry["in_context_compute_seconds"] = compute_alone;
        entry["skew_per_compute_second"] = skew_per_compute_second(member, group, compute_alone);
      }
      out.push_back(entry);
    }
  }
  return out;
}

}  // namespace hetpar
