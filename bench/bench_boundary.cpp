// Microbenchmark of the boundary communicator: forward + backward of the real
// BoundaryExchange over real Gloo ranks (fp32, CPU), for several layout pairs
// and sizes, each beside a plain memory copy of the same bytes on rank 0.
// Two paths are timed: the autograd all-to-all-v (`forward` and its backward,
// what colocated training uses) for every pair, and, for the non-colocated
// pairs, the point-to-point halves (post_forward -> receive_forward ->
// post_backward -> receive_backward, what non-colocated training uses).
//
// Started without a launch environment, the binary re-launches itself through
// the local launcher once per world size (2, then 4). Every rank builds a real
// Runtime and runs the same benchmark list with fixed iteration counts, so all
// ranks make the same collective calls; only rank 0 reports.
//
// Definitions (also in bench/README.md):
//   boundary time  one forward + backward of the exchange; per iteration the
//                  slowest rank's wall time (ranks aligned before each one).
//   p2p time       one round trip of the point-to-point halves: post_forward,
//                  receive_forward, post_backward, receive_backward, then every
//                  send waited; timed like the boundary time.
//   bytes          the bytes the busiest rank sends plus receives through the
//                  all-to-all-v, forward and backward together, its own rows
//                  (colocated ranks sending to themselves) included.
//   memcpy time    one at::Tensor::copy_ of a tensor of `bytes` bytes on rank 0,
//                  other ranks idle in a barrier meanwhile.
//   ratio          boundary (or p2p) time / memcpy time. A non-colocated pair
//                  sends no row to itself, so both paths move the same bytes.
//
// Before timing, every boundary and p2p benchmark checks on every rank that
// the rows and gradients it got are exactly the reference (only data moves),
// so a broken exchange fails the run instead of being measured. `--smoke` runs
// each benchmark once (1 iteration, small size) and checks all of them were
// verified: every pair's all-to-all and every non-colocated pair's p2p halves.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "boundary/boundary_exchange.hpp"
#include "boundary/routing_plan.hpp"
#include "dist/launch_env.hpp"
#include "dist/runtime.hpp"
#include "launch/local_launcher.hpp"
#include "parallel/placement.hpp"
#include "parallel/rank_grid.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the launching process on its ranks: where rank 0 writes its results.
constexpr const char* kWorkerVar = "HETPAR_BENCH_WORKER";
constexpr int kWorldSizes[] = {2, 4};
constexpr int kTimeoutMs = 120'000;  // collective timeout inside the ranks

// ---- the workload -----------------------------------------------------------

struct Pair {
  const char* name;
  Placement placement;
  Layout encoder;  // {tp, cp, pp, dp}
  Layout llm;
  int world;
};

constexpr Pair kPairs[] = {
    {"coloc_enc_dp2_to_llm_tp2", Placement::Colocated, {1, 1, 1, 2}, {2, 1, 1, 1}, 2},
    {"coloc_enc_dp2_to_llm_dp2", Placement::Colocated, {1, 1, 1, 2}, {1, 1, 1, 2}, 2},
    {"noncoloc_enc_dp1_to_llm_dp1", Placement::NonColocated, {1, 1, 1, 1}, {1, 1, 1, 1}, 2},
    {"noncoloc_enc_dp2_to_llm_tp2", Placement::NonColocated, {1, 1, 1, 2}, {2, 1, 1, 1}, 4},
    {"coloc_fan_in_enc_dp4_to_llm_tp4", Placement::Colocated, {1, 1, 1, 4}, {4, 1, 1, 1}, 4},
};
constexpr int64_t kHiddens[] = {256, 1024};
constexpr int64_t kSmokeHidden = 256;

// 16 images of 64 tokens over 8 samples of 256 positions. Ragged on purpose,
// so that an encoder DP split and an LLM DP split of the samples disagree
// (images 8 and 9 cross between the two DP groups of the dp2 <-> dp2 pair).
constexpr int64_t kTokensPerImage = 64, kSeqLen = 256;
constexpr int kImagesPerSample[] = {3, 3, 2, 2, 1, 1, 2, 2};

BoundaryBatch make_batch() {
  BoundaryBatch batch{kSeqLen, kTokensPerImage, {}};
  for (int n : kImagesPerSample) {
    std::vector<int64_t> starts;
    for (int k = 0; k < n; ++k) starts.push_back(8 + 80 * k);
    batch.image_starts.push_back(starts);
  }
  return batch;
}

struct Case {
  const Pair* pair = nullptr;
  int64_t hidden = 0;
  ModulePlacement placement;
  BoundaryPlan plan;
  int64_t bytes = 0;         // busiest rank: sent + received, forward + backward
  int64_t remote_bytes = 0;  // the same rank's part of it that crosses to another rank
  int busiest_rank = 0;
  std::string key() const { return fmt::format("{}/hidden:{}", pair->name, hidden); }
  // Non-colocated training moves the rows with the point-to-point halves.
  bool has_p2p() const { return pair->placement == Placement::NonColocated; }
};

// Rows rank `rank` sends plus receives in one direction (a row to itself counts both ways).
void count_rows(const Transfers& transfers, int rank, int64_t& all, int64_t& remote) {
  for (const auto& [ends, blocks] : transfers) {
    const auto [src, dst] = ends;
    int64_t rows = 0;
    for (const RowBlock& b : blocks) rows += b.tokens;
    const int64_t times = (src == rank) + (dst == rank);
    all += times * rows;
    if (src != dst) remote += times * rows;
  }
}

Case make_case(const Pair& pair, int64_t hidden) {
  Case c;
  c.pair = &pair;
  c.hidden = hidden;
  c.placement = resolve_placement(pair.placement, pair.encoder, pair.llm);
  if (c.placement.world_size != pair.world) {
    throw std::logic_error(fmt::format("pair {} needs {} ranks, listed as {}", pair.name,
                                       c.placement.world_size, pair.world));
  }
  c.plan = plan_boundary(c.placement, make_batch());
  const int64_t row_bytes = hidden * static_cast<int64_t>(sizeof(float));
  for (int r = 0; r < pair.world; ++r) {
    int64_t all = 0, remote = 0;
    count_rows(c.plan.forward, r, all, remote);
    count_rows(c.plan.backward, r, all, remote);
    if (all * row_bytes > c.bytes) {
      c.bytes = all * row_bytes;
      c.remote_bytes = remote * row_bytes;
      c.busiest_rank = r;
    }
  }
  // The point-to-point path refuses rows to oneself; its rows must all cross ranks.
  if (c.has_p2p() && c.bytes != c.remote_bytes) {
    throw std::logic_error(fmt::format("pair {}: a non-colocated plan routes rows to their own rank", pair.name));
  }
  return c;
}

// Row (image j, token t), channel h: (j * tokens + t) * hidden + h, then scaled
// and shifted by `sign`/`shift` for gradients. Every value is exact in fp32.
at::Tensor rows_of(const std::vector<std::pair<int, int64_t>>& rows, int64_t hidden, float sign, float shift) {
  std::vector<int64_t> ids;
  ids.reserve(rows.size());
  for (const auto& [j, t] : rows) ids.push_back(j * kTokensPerImage + t);
  const at::Tensor id = at::tensor(ids, at::kLong).to(at::kFloat).unsqueeze(1);
  return (id * static_cast<float>(hidden) + at::arange(hidden, at::kFloat).unsqueeze(0)) * sign + shift;
}

// The rows an encoder rank of DP group `dp` holds, in image order ([] off the encoder).
std::vector<std::pair<int, int64_t>> encoder_rows(const BoundaryPlan& plan, int dp) {
  std::vector<std::pair<int, int64_t>> out;
  for (size_t j = 0; j < plan.image_encoder_dp.size(); ++j) {
    if (dp < 0 || plan.image_encoder_dp[j] != dp) continue;
    for (int64_t t = 0; t < kTokensPerImage; ++t) out.push_back({static_cast<int>(j), t});
  }
  return out;
}

// ---- the ranks ----------------------------------------------------------------

struct Settings {
  bool smoke = false;
  int64_t iterations = 0;  // boundary iterations; 0: the defaults below
};

int64_t boundary_iterations(const Settings& s, int64_t hidden) {
  if (s.smoke) return 1;
  if (s.iterations > 0) return s.iterations;
  return hidden <= 256 ? 200 : 60;
}
int64_t memcpy_iterations(const Settings& s, int64_t hidden) {
  if (s.smoke) return 1;
  return hidden <= 256 ? 2000 : 500;
}

struct Row {
  std::string pair;
  int64_t hidden = 0;
  double boundary_us = -1, memcpy_us = -1;
  int64_t bytes = 0;
  double p2p_us = -1;  // the point-to-point halves; -1: not measured (colocated, or filtered out)
};

Runtime* g_runtime = nullptr;
std::map<std::string, Row> g_results;  // rank 0: by case key
std::vector<std::string> g_order;      // case keys in registration order
int g_verified = 0;                    // boundary (all-to-all) cases checked exact on this rank
int g_verified_p2p = 0;                // point-to-point cases checked exact on this rank

[[noreturn]] void fail(const std::string& why) { throw std::runtime_error(why); }

// Rank 0's table row of a case (with repetitions: the last one measured).
Row& result_row(const Case& c) {
  Row& row = g_results[c.key()];
  row.pair = c.pair->name;
  row.hidden = c.hidden;
  row.bytes = c.bytes;
  return row;
}

void set_counters(benchmark::State& state, const Case& c, double seconds) {
  state.counters["bytes"] = static_cast<double>(c.bytes);
  state.counters["remote_bytes"] = static_cast<double>(c.remote_bytes);
  state.counters["GB/s"] = seconds > 0 ? static_cast<double>(c.bytes) / seconds / 1e9 : 0;
}

// Runs `body` once per benchmark iteration and returns the mean iteration time.
// An iteration's time is the slowest rank's; the scalar max all-reduce that
// finds it is not timed and lines the ranks up for the next iteration.
template <class Body>
double time_slowest_rank(benchmark::State& state, Group& world, Body&& body) {
  at::Tensor slowest = at::zeros({1}, at::kDouble);
  double total = 0;
  world.barrier();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    body();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    slowest.fill_(dt);
    world.all_reduce(slowest, ReduceOp::kMax);
    const double s = slowest.item<double>();
    state.SetIterationTime(s);
    total += s;
  }
  return total / static_cast<double>(state.iterations());
}

int encoder_dp_of(const Case& c, int rank) {
  const RankGrid encoder(c.placement.encoder, c.placement.encoder_ranks.offset);
  return encoder.contains(rank) ? encoder.coord(rank).dp : -1;
}

// Forward + backward of the exchange; the time of an iteration is the slowest rank's.
void bm_boundary(benchmark::State& state, const Case* c) {
  Runtime& rt = *g_runtime;
  Group& world = rt.world();
  const int dp = encoder_dp_of(*c, rt.rank());
  BoundaryExchange exchange(c->plan, kTokensPerImage, world, dp);
  const auto held = encoder_rows(c->plan, dp);
  const at::Tensor rows = rows_of(held, c->hidden, 1, 0).set_requires_grad(true);
  const at::Tensor grad_out = rows_of(exchange.needed(), c->hidden, -1, -0.5f);

  // Untimed check pass (also the warm-up): rows forward, gradients backward, exact.
  const at::Tensor out = exchange.forward(rows);
  if (out.size(0) != exchange.needed_rows() || !at::equal(out, rows_of(exchange.needed(), c->hidden, 1, 0))) {
    fail(fmt::format("{}: rank {} received wrong rows in the forward exchange", c->key(), rt.rank()));
  }
  const at::Tensor grad = torch::autograd::grad({out}, {rows}, {grad_out})[0];
  if (!at::equal(grad, rows_of(held, c->hidden, -1, -0.5f))) {
    fail(fmt::format("{}: rank {} received wrong gradients in the backward exchange", c->key(), rt.rank()));
  }
  ++g_verified;

  const double mean = time_slowest_rank(state, world, [&] {
    const at::Tensor o = exchange.forward(rows);
    const at::Tensor g = torch::autograd::grad({o}, {rows}, {grad_out})[0];
  });
  set_counters(state, *c, mean);
  if (rt.rank() == 0) {
    Row& row = result_row(*c);
    row.boundary_us = mean * 1e6;
    if (row.memcpy_us > 0) state.counters["ratio"] = row.boundary_us / row.memcpy_us;
  }
}

// Message tags of the point-to-point round trip. Every send is waited before
// an iteration ends, so one fixed pair serves all iterations.
constexpr int kRowsTag = 0, kGradsTag = 1;

struct RoundTrip {
  at::Tensor rows;   // received as an LLM rank: [needed_rows(), hidden]
  at::Tensor grads;  // received as an encoder rank: [this rank's encoder rows, hidden]
};

// One round trip of the point-to-point halves, in the order non-colocated
// training runs them. Every rank calls every half; a half with nothing to move
// on this rank (rows off the encoder, gradients off the LLM) posts or waits
// for nothing.
RoundTrip p2p_round_trip(const BoundaryExchange& exchange, const at::Tensor& rows, const at::Tensor& grad_out,
                         int64_t hidden) {
  std::vector<Group::Pending> sends = exchange.post_forward(rows, kRowsTag);
  RoundTrip got;
  got.rows = exchange.receive_forward(hidden, kRowsTag);
  std::vector<Group::Pending> grad_sends = exchange.post_backward(grad_out, kGradsTag);
  got.grads = exchange.receive_backward(hidden, kGradsTag);
  for (Group::Pending& s : sends) s.wait();
  for (Group::Pending& s : grad_sends) s.wait();
  return got;
}

// The same exchange over the point-to-point halves (non-colocated pairs only),
// checked against the same reference as bm_boundary and timed the same way.
void bm_p2p(benchmark::State& state, const Case* c) {
  Runtime& rt = *g_runtime;
  Group& world = rt.world();
  const int dp = encoder_dp_of(*c, rt.rank());
  const BoundaryExchange exchange(c->plan, kTokensPerImage, world, dp);
  const auto held = encoder_rows(c->plan, dp);
  const at::Tensor rows = rows_of(held, c->hidden, 1, 0);
  const at::Tensor grad_out = rows_of(exchange.needed(), c->hidden, -1, -0.5f);

  // Untimed check pass (also the warm-up): rows forward, gradients backward, exact.
  const RoundTrip got = p2p_round_trip(exchange, rows, grad_out, c->hidden);
  if (got.rows.size(0) != exchange.needed_rows() ||
      !at::equal(got.rows, rows_of(exchange.needed(), c->hidden, 1, 0))) {
    fail(fmt::format("{}: rank {} received wrong rows through receive_forward", c->key(), rt.rank()));
  }
  if (got.grads.size(0) != static_cast<int64_t>(held.size()) ||
      !at::equal(got.grads, rows_of(held, c->hidden, -1, -0.5f))) {
    fail(fmt::format("{}: rank {} received wrong gradients through receive_backward", c->key(), rt.rank()));
  }
  ++g_verified_p2p;

  const double mean = time_slowest_rank(state, world, [&] { p2p_round_trip(exchange, rows, grad_out, c->hidden); });
  set_counters(state, *c, mean);
  if (rt.rank() == 0) {
    Row& row = result_row(*c);
    row.p2p_us = mean * 1e6;
    if (row.memcpy_us > 0) state.counters["ratio"] = row.p2p_us / row.memcpy_us;
  }
}

// One copy_ of `bytes` bytes on rank 0; the other ranks wait in a barrier.
void bm_memcpy(benchmark::State& state, const Case* c) {
  Runtime& rt = *g_runtime;
  rt.world().barrier();
  if (rt.rank() == 0) {
    const at::Tensor src = at::rand({c->bytes / static_cast<int64_t>(sizeof(float))}, at::kFloat);
    at::Tensor dst = at::empty_like(src);
    dst.copy_(src);  // warm-up: pages touched
    double total = 0;
    for (auto _ : state) {
      const auto t0 = Clock::now();
      dst.copy_(src);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      state.SetIterationTime(dt);
      total += dt;
    }
    if (!at::equal(dst, src)) fail(c->key() + ": memcpy baseline copied wrong bytes");
    const double mean = total / static_cast<double>(state.iterations());
    set_counters(state, *c, mean);
    result_row(*c).memcpy_us = mean * 1e6;
  } else {
    for (auto _ : state) state.SetIterationTime(1e-9);  // not reported
  }
  rt.world().barrier();
}

// Prints nothing: the report of ranks other than 0.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::string results_text(int verified, int verified_p2p) {
  std::ostringstream out;
  out << "verified\t" << verified << "\t" << verified_p2p << "\n";
  for (const std::string& key : g_order) {
    if (!g_results.contains(key)) continue;  // filtered out
    const Row& r = g_results.at(key);
    out << "row\t" << r.pair << "\t" << r.hidden << "\t" << r.boundary_us << "\t" << r.memcpy_us << "\t" << r.bytes
        << "\t" << r.p2p_us << "\n";
  }
  return out.str();
}

void print_table(const std::vector<Row>& rows);
std::vector<Row> parse_results(std::istream& in, int& verified, int& verified_p2p);

[[noreturn]] void run_rank(const LaunchEnv& env, const Settings& settings, std::vector<char*> args) {
  set_log_rank(env.rank);
  try {
    RuntimeOptions options;
    options.backend = "gloo";
    options.timeout = std::chrono::milliseconds(kTimeoutMs);
    options.intra_op_threads = 1;
    Runtime runtime(env, options);
    g_runtime = &runtime;

    static std::vector<Case> cases;  // registered benchmarks point into it
    cases.reserve(std::size(kPairs) * std::size(kHiddens));
    for (const Pair& pair : kPairs) {
      if (pair.world != env.world_size) continue;
      for (int64_t hidden : kHiddens) {
        if (settings.smoke && hidden != kSmokeHidden) continue;
        const Case& c = cases.emplace_back(make_case(pair, hidden));
        g_order.push_back(c.key());
        benchmark::RegisterBenchmark(("memcpy/" + c.key()).c_str(), bm_memcpy, &c)
            ->Iterations(memcpy_iterations(settings, hidden))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("boundary/" + c.key()).c_str(), bm_boundary, &c)
            ->Iterations(boundary_iterations(settings, hidden))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        if (c.has_p2p()) {
          benchmark::RegisterBenchmark(("boundary_p2p/" + c.key()).c_str(), bm_p2p, &c)
              ->Iterations(boundary_iterations(settings, hidden))
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    if (cases.empty()) fail(fmt::format("no layout pair runs on {} ranks", env.world_size));

    // Only rank 0 writes a --benchmark_out file; the others would clobber it.
    if (env.rank != 0) {
      std::erase_if(args, [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; });
    }
    int argc = static_cast<int>(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&argc, args.data());
    if (env.rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      SilentReporter silent;
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    benchmark::Shutdown();
    runtime.world().barrier();  // no rank leaves while another may still need it

    if (env.rank == 0) {
      if (const char* path = std::getenv(kWorkerVar); path && *path) {
        std::ofstream(path) << results_text(g_verified, g_verified_p2p);
      } else {  // started by another launcher: this world size's table here
        int verified = 0, verified_p2p = 0;
        std::istringstream text(results_text(g_verified, g_verified_p2p));
        print_table(parse_results(text, verified, verified_p2p));
      }
    }
  } catch (const std::exception& e) {
    std::cout.flush();
    die_of(e);
  }
  std::cout.flush();
  std::fflush(stdout);
  _exit(0);  // skip the process groups' destructors, like the real binary
}

// ---- the launching process ------------------------------------------------------

// One line per pair and hidden size for the all-to-all (boundary_us), and for
// a non-colocated pair a second line, "<pair> p2p", with the point-to-point
// round trip in the same column and its own ratio to the same memcpy.
void print_table(const std::vector<Row>& rows) {
  auto us = [](double v) { return v > 0 ? fmt::format("{:.1f}", v) : std::string("-"); };
  auto line = [&](const std::string& pair, const Row& r, double time_us) {
    const std::string ratio = time_us > 0 && r.memcpy_us > 0 ? fmt::format("{:.1f}", time_us / r.memcpy_us) : "-";
    std::printf("%-32s %6lld %12s %10s %8s %12lld\n", pair.c_str(), static_cast<long long>(r.hidden),
                us(time_us).c_str(), us(r.memcpy_us).c_str(), ratio.c_str(), static_cast<long long>(r.bytes));
  };
  std::printf("\n%-32s %6s %12s %10s %8s %12s\n", "pair", "hidden", "boundary_us", "memcpy_us", "ratio", "bytes");
  for (const Row& r : rows) {
    line(r.pair, r, r.boundary_us);
    if (r.p2p_us > 0) line(r.pair + " p2p", r, r.p2p_us);
  }
  std::fflush(stdout);
}

// Reads what rank 0 wrote; `verified` and `verified_p2p` get its counts of
// exact all-to-all and point-to-point cases.
std::vector<Row> parse_results(std::istream& in, int& verified, int& verified_p2p) {
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    std::getline(fields, kind, '\t');
    if (kind == "verified") {
      fields >> verified >> verified_p2p;
    } else if (kind == "row") {
      Row r;
      std::getline(fields, r.pair, '\t');
      fields >> r.hidden >> r.boundary_us >> r.memcpy_us >> r.bytes >> r.p2p_us;
      rows.push_back(r);
    }
  }
  return rows;
}

// --benchmark_out=report.json -> --benchmark_out=report.w2.json for the 2-rank
// run: each world size's rank 0 writes its own file instead of overwriting one.
std::string per_world_out(const std::string& arg, int world) {
  const std::string flag = "--benchmark_out=";
  if (arg.rfind(flag, 0) != 0) return arg;
  const std::filesystem::path path(arg.substr(flag.size()));
  std::filesystem::path out = path;
  out.replace_filename(path.stem().string() + ".w" + std::to_string(world) + path.extension().string());
  return flag + out.string();
}

int run_launcher(const Settings& settings, const std::vector<std::string>& forwarded) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<Row> all;
  int verified_total = 0, verified_p2p_total = 0;
  for (int world : kWorldSizes) {
    char path[] = "/tmp/bench_boundary.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
      std::fprintf(stderr, "bench_boundary: cannot create a results file: %s\n", std::strerror(errno));
      return kExitError;
    }
    close(fd);
    LocalLaunchSpec spec;
    spec.argv = {self};
    for (const std::string& a : forwarded) spec.argv.push_back(per_world_out(a, world));
    spec.nproc = world;
    spec.intra_op_threads = 1;
    spec.grace = std::chrono::milliseconds(15'000);
    spec.env = {{kWorkerVar, path}};
    spec.echo_output = false;  // rank 0's report is printed below, untagged
    std::printf("== %d ranks%s ==\n", world, settings.smoke ? " (smoke)" : "");
    std::fflush(stdout);
    const LaunchResult result = launch_local(spec);
    for (const RankOutcome& r : result.ranks) {
      if (r.rank == 0 || result.exit_code != 0) {
        if (r.rank != 0) std::printf("---- rank %d ----\n", r.rank);
        std::fputs(r.output.c_str(), stdout);
      }
    }
    std::fflush(stdout);
    int verified = 0, verified_p2p = 0;
    std::ifstream results(path);
    std::vector<Row> rows = parse_results(results, verified, verified_p2p);
    results.close();
    std::filesystem::remove(path);
    if (result.exit_code != 0) {
      std::fprintf(stderr, "bench_boundary: the %d-rank run failed: %s\n", world, describe_failure(result).c_str());
      return result.exit_code;
    }
    verified_total += verified;
    verified_p2p_total += verified_p2p;
    all.insert(all.end(), rows.begin(), rows.end());
  }
  if (settings.smoke) {
    const int want = static_cast<int>(std::size(kPairs));
    const int want_p2p = static_cast<int>(
        std::count_if(std::begin(kPairs), std::end(kPairs), [](const Pair& p) { return p.placement == Placement::NonColocated; }));
    if (verified_total != want || verified_p2p_total != want_p2p) {
      std::fprintf(stderr,
                   "bench_boundary --smoke: %d of %d layout pairs (all-to-all) and %d of %d non-colocated pairs "
                   "(point-to-point) were checked (a filter?)\n",
                   verified_total, want, verified_p2p_total, want_p2p);
      return kExitError;
    }
    std::printf(
        "\nsmoke: %d layout pairs (all-to-all) and %d non-colocated pairs (point-to-point halves), forward rows "
        "and backward gradients exact on every rank\n",
        want, want_p2p);
    return 0;
  }
  print_table(all);
  return 0;
}

void usage() {
  std::printf(
      "usage: bench_boundary [--smoke] [--iterations=N] [--benchmark_<flag>=...]\n"
      "  Times forward+backward of the boundary exchange on 2 and 4 local Gloo ranks beside a\n"
      "  copy_ of the same bytes: the all-to-all for every pair, and the point-to-point halves\n"
      "  (boundary_p2p/...) for the non-colocated pairs. --smoke: each once at hidden %lld,\n"
      "  checked exact.\n"
      "  --iterations=N: boundary and p2p iterations per benchmark (default 200 at hidden 256,\n"
      "  60 at 1024).\n"
      "  --benchmark_* flags go to every rank (random interleaving and warm-up time are refused:\n"
      "  every rank must make the same collective calls); --benchmark_out=F.json writes\n"
      "  F.w2.json and F.w4.json, one per world size.\n",
      static_cast<long long>(kSmokeHidden));
}

}  // namespace
}  // namespace hetpar::bench

int main(int argc, char** argv) {
  using namespace hetpar::bench;
  Settings settings;
  std::vector<std::string> forwarded;  // to the ranks: everything but --help
  std::vector<char*> benchmark_args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    }
    forwarded.push_back(a);
    if (a == "--smoke") {
      settings.smoke = true;
    } else if (a.rfind("--iterations=", 0) == 0) {
      char* end = nullptr;
      settings.iterations = std::strtoll(a.c_str() + 13, &end, 10);
      if (*end != '\0' || settings.iterations < 1) {
        std::fprintf(stderr, "bench_boundary: bad %s (an integer >= 1)\n", a.c_str());
        return hetpar::kExitConfigError;
      }
    } else if (a.rfind("--benchmark_enable_random_interleaving", 0) == 0 ||
               a.rfind("--benchmark_min_warmup_time", 0) == 0) {
      std::fprintf(stderr, "bench_boundary: %s is refused: ranks would make different collective calls\n",
                   a.c_str());
      return hetpar::kExitConfigError;
    } else if (a.rfind("--benchmark_", 0) == 0) {
      benchmark_args.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "bench_boundary: unknown argument %s\n", a.c_str());
      usage();
      return hetpar::kExitConfigError;
    }
  }

  std::optional<hetpar::LaunchEnv> env;
  try {
    env = hetpar::read_launch_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_boundary: %s\n", e.what());
    return hetpar::kExitConfigError;
  }
  if (env) run_rank(*env, settings, benchmark_args);

  // The launching process: check the benchmark flags here, once, before any rank starts.
  int bargc = static_cast<int>(benchmark_args.size());
  std::vector<char*> check = benchmark_args;
  check.push_back(nullptr);
  benchmark::Initialize(&bargc, check.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, check.data())) return hetpar::kExitConfigError;
  return run_launcher(settings, forwarded);
}
