#include "cli/calibrate_command.hpp"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/job_command.hpp"
#include "dist/launch_env.hpp"
#include "launch/local_launcher.hpp"
#include "launch/local_limits.hpp"
#include "metrics/compute_peak.hpp"
#include "plan/calibration.hpp"
#include "util/build_info.hpp"
#include "util/durable_file.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// The 1-minute load average (-1 where /proc/loadavg cannot be read): other
// work running beside a calibration slows every figure in it.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  return in >> load ? load : -1;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// On a launched rank: the collectives, rank 0 writing them to `rank_output`.
int run_rank(const CalibrateArgs& args, const LaunchEnv& env, const CalibrationOptions& options) {
  set_log_rank(env.rank);
  Runtime runtime(env, RuntimeOptions{});
  // What a rank holds with its process group up and no tensor yet: the memory model's reserved part.
  const double resident = resident_bytes();
  const nlohmann::json collectives = measure_collectives(runtime, options);
  if (env.rank == 0) {
    write_file_atomic(args.rank_output, nlohmann::json{{"collectives", collectives}, {"resident_bytes", resident}}.dump());
  }
  return 0;
}

std::string summary_text(const nlohmann::json& p) {
  double gemm = 0;
  for (const auto& g : p["gemm"]) gemm = std::max(gemm, g["flops_per_second"].get<double>());
  std::string text = fmt::format("GEMM: best {:.1f} GFLOP/s of {} shapes\n", gemm / 1e9, p["gemm"].size());
  for (const auto& a : p["attention"]) {
    text += fmt::format("attention seq {:>5} head {:>3} {:<13}: forward {:7.2f} ms, backward {:7.2f} ms\n",
                        a["seq"].get<int64_t>(), a["head_dim"].get<int64_t>(),
                        a["causal"].get<bool>() ? "causal" : "bidirectional", a["forward_seconds"].get<double>() * 1e3,
                        a["backward_seconds"].get<double>() * 1e3);
  }
  for (const auto& m : p["memory_bound"]) {
    text += fmt::format("{:<10} {:>8} elements: {:6.2f} GB/s\n", m["op"].get<std::string>(),
                        m["elements"].get<int64_t>(), m["bytes_per_second"].get<double>() / 1e9);
  }
  for (const auto& c : p["collectives"]) {
    text += c.contains("bytes_per_second")
                ? fmt::format("{:<14} over {} ranks: latency {:7.1f} us, {:6.2f} GB/s\n", c["op"].get<std::string>(),
                              c["group_size"].get<int>(), c["latency_seconds"].get<double>() * 1e6,
                              c["bytes_per_second"].get<double>() / 1e9)
                : fmt::format("{:<14} over {} ranks: no fit ({})\n", c["op"].get<std::string>(),
                              c["group_size"].get<int>(), c["fit_error"].get<std::string>());
  }
  return text;
}

}  // namespace

CLI::App* add_calibrate_command(CLI::App& app, CalibrateArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure this machine's GEMM, attention, memory-bound and collective rates into a profile "
                   "for the step-time model (one rank's thread, then --ranks local ranks)");
  cmd->add_option("--out", args.out, "profile file to write (JSON)")->capture_default_str();
  cmd->add_option("--ranks", args.ranks, "local ranks for the collectives (default: 2 per core, 2 to 8)")
      ->check(CLI::Range(2, 1 << 16));
  cmd->add_flag("--quick", args.quick, "a small grid: seconds instead of minutes (tests)");
  cmd->add_option("--rank-output", args.rank_output)->group("");  // the ranks' part, set by calibrate itself
  return cmd;
}

int run_calibrate(const CalibrateArgs& args) {
  CalibrationOptions options;
  options.quick = args.quick;
  if (options.quick) options.seconds_per_point = 0.01;
  std::optional<LaunchEnv> env;
  try {
    env = read_launch_env();
  } catch (const std::exception& e) {
    die(kExitConfigError, std::string("launch environment: ") + e.what());
  }
  if (env) {
    if (args.rank_output.empty()) die(kExitConfigError, "calibrate under torchrun/srun is not supported: run it alone");
    return run_rank(args, *env, options);
  }
  const int ranks = args.ranks ? args.ranks : std::clamp(2 * cores(), 2, 8);
  if (ranks > 4 * cores()) {
    die(kExitConfigError, fmt::format("--ranks {}: more than 4 ranks per core on this machine of {} cores", ranks,
                                      cores()));
  }
  const std::filesystem::path out(args.out);
  if (out.filename().empty() || std::filesystem::is_directory(out)) {
    die(kExitConfigError, "--out " + args.out + ": names a directory, not a profile file");
  }
  try {
    ensure_writable_dir(out.parent_path().empty() ? "." : out.parent_path().string());
  } catch (const std::exception& e) {
    die(kExitConfigError, std::string("--out: ") + e.what());
  }
  const auto start = std::chrono::steady_clock::now();
  const double load_before = load_average();
  if (load_before > 0.5 * cores()) {
    log_error("calibrate: warning: the load average is {:.1f} on {} cores; other work running now slows every figure "
              "(a profile measured beside a compile came out 35% slower in GEMMs); calibrate on a quiet machine",
              load_before, cores());
  }
  at::set_num_threads(1);  // one rank's compute, as the trainer's ranks run by default
  log_info("calibrate: GEMM, attention and memory-bound ops on one thread");
  nlohmann::json profile = {{"format", "hetpar-profile/1"}};
  profile["gemm"] = measure_gemm(options);
  profile["attention"] = measure_attention(options);
  profile["memory_bound"] = measure_memory_bound(options);

  log_info("calibrate: collectives over {} local ranks", ranks);
  const std::string part = args.out + ".ranks.tmp";
  LocalLaunchSpec spec;
  spec.nproc = ranks;
  spec.argv = {self_executable(), "calibrate", "--out", args.out, "--ranks", std::to_string(ranks), "--rank-output",
               part};
  if (args.quick) spec.argv.push_back("--quick");
  spec.echo_output = true;
  const LaunchResult result = launch_local(spec);
  if (result.exit_code != 0) die(kExitError, "calibrate: the collectives failed: " + describe_failure(result));
  std::ifstream in(part);
  const nlohmann::json ranks_part = nlohmann::json::parse(in);
  profile["collectives"] = ranks_part.at("collectives");
  std::filesystem::remove(part);

  profile["measured"] = {
      {"device", cpu_device_name()}, {"cores", cores()}, {"intra_op_threads", 1}, {"ranks", ranks},
      {"backend", "gloo"}, {"commit", build_commit()}, {"hetpar_version", build_version()},
      {"torch_version", build_torch_version()}, {"date", utc_now()}, {"quick", args.quick},
      {"load_average_before", load_before},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};
  // Host memory, which every local rank shares, and what a rank holds before
  // its model (for the memory model, plan/memory_model.hpp).
  profile["memory"] = {{"bytes_per_device", total_memory_bytes()},
                       {"shared_by_all_ranks", true},
                       {"reserved_bytes", ranks_part.at("resident_bytes")}};
  // CPU attention with grouped-query heads takes the unfused path, which keeps
  // its probabilities for the backward (the memory model counts them).
  profile["attention_keeps_probabilities"] = true;
  write_file_atomic(args.out, profile.dump(2) + "\n");
  log_info("{}", summary_text(profile));
  log_info("calibrate: wrote {} in {:.0f} s", args.out, profile["measured"]["seconds"].get<double>());
  return 0;
}

}  // namespace hetpar
