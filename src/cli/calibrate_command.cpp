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
#include "dist/backend_factory.hpp"
#include "dist/device.hpp"
#include "dist/launch_env.hpp"
#include "launch/local_launcher.hpp"
#include "launch/local_limits.hpp"
#include "metrics/compute_peak.hpp"
#include "model/attention.hpp"
#include "model/norms.hpp"
#include "tp/weight_grad.hpp"
#include "plan/calibration.hpp"
#include "util/build_info.hpp"
#include "util/durable_file.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"
#include "util/output_dir.hpp"

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

// This rank's GPU (LOCAL_RANK; GPU 0 for the launching process), made current, TF32 off.
at::Device select_gpu(const LaunchEnv& env) {
  RunConfig gpu;
  gpu.runtime.device = "cuda";
  return select_device(gpu, env);
}

// On a launched rank: the collectives, rank 0 writing them to `rank_output`.
int run_rank(const CalibrateArgs& args, const LaunchEnv& env, CalibrationOptions options) {
  set_log_rank(env.rank);
  RuntimeOptions runtime_options;
  if (args.device == "cuda") {
    options.device = select_gpu(env);
    runtime_options.backend = "nccl";
    runtime_options.device = options.device;
  }
  Runtime runtime(env, runtime_options);
  // What a rank holds with its process group up and no tensor yet: the memory
  // model's reserved part (on a GPU, the device memory the context and
  // communicators take).
  const double resident = options.device.is_cuda() ? device_bytes_in_use(options.device) : resident_bytes();
  const nlohmann::json collectives = measure_collectives(runtime, options);
  nlohmann::json part = {{"collectives", collectives}, {"resident_bytes", resident}};
  if (!options.device.is_cuda()) part["shared_cores"] = measure_shared_cores(runtime, cores());
  if (env.rank == 0) write_file_atomic(args.rank_output, part.dump());
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
  for (const auto& l : p.value("layers", nlohmann::json::array())) {
    text += fmt::format("{:<7} layer hidden {:>4}, {:>4} tokens: forward {:7.2f} ms, backward {:7.2f} ms\n",
                        l["module"].get<std::string>(), l["hidden"].get<int64_t>(),
                        l["sequences"].get<int64_t>() * l["seq"].get<int64_t>(), l["forward_seconds"].get<double>() * 1e3,
                        l["backward_seconds"].get<double>() * 1e3);
  }
  for (const auto& c : p["collectives"]) {
    if (c.contains("in_context_bytes_per_second")) {
      text += fmt::format("{:<14} over {} ranks in context: latency {:7.1f} us, {:6.2f} GB/s\n",
                          c["op"].get<std::string>(), c["group_size"].get<int>(),
                          c["in_context_latency_seconds"].get<double>() * 1e6,
                          c["in_context_bytes_per_second"].get<double>() / 1e9);
    }
    text += c.contains("bytes_per_second")
                ? fmt::format("{:<14} over {} ranks: latency {:7.1f} us, {:6.2f} GB/s\n", c["op"].get<std::string>(),
                              c["group_size"].get<int>(), c["latency_seconds"].get<double>() * 1e6,
                              c["bytes_per_second"].get<double>() / 1e9)
                : fmt::format("{:<14} over {} ranks: no fit ({})\n", c["op"].get<std::string>(),
                              c["group_size"].get<int>(), c["fit_error"].get<std::string>());
  }
  if (const auto shared = p.find("shared_cores"); shared != p.end()) {
    text += fmt::format("shared cores: {} ranks on {} cores get {:.0f} % of the ideal\n", (*shared)["ranks"].get<int>(),
                        (*shared)["cores"].get<int>(), 100 * (*shared)["efficiency"].get<double>());
  }
  return text;
}

void check_out_path(const std::string& out_arg) {
  const std::filesystem::path out(out_arg);
  if (out.filename().empty() || std::filesystem::is_directory(out)) {
    die(kExitConfigError, "--out " + out_arg + ": names a directory, not a profile file");
  }
  // An existing file is replaced only when it is an earlier profile.
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(out, ec))) {
    if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(out, ec)) ||
        json_format(out.string()) != "hetpar-profile/1") {
      die(kExitConfigError, "--out " + out_arg + ": exists and is not a hetpar profile (format hetpar-profile/1), "
                            "so calibrate will not replace it; choose another --out");
    }
  }
  try {
    ensure_writable_dir(out.parent_path().empty() ? "." : out.parent_path().string());
  } catch (const std::exception& e) {
    die(kExitConfigError, std::string("--out: ") + e.what());
  }
}

// A published profile to start a GPU calibration from.
nlohmann::json read_base_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) die(kExitConfigError, "--base " + path + ": cannot be read");
  nlohmann::json base = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (base.is_discarded() || base.value("format", "") != "hetpar-profile/1" || !base.contains("collectives") ||
      !base.contains("memory")) {
    die(kExitConfigError, "--base " + path + ": not a hetpar profile with collectives and memory (format hetpar-profile/1)");
  }
  return base;
}

// The collectives over `ranks` local ranks (one per GPU on a GPU), and what a
// rank holds with its process group up: rank 0's part of the profile.
nlohmann::json collectives_on_local_ranks(const CalibrateArgs& args, int ranks) {
  log_info("calibrate: collectives over {} local ranks", ranks);
  const std::string part = args.out + ".ranks.tmp";
  LocalLaunchSpec spec;
  spec.nproc = ranks;
  spec.argv = {self_executable(), "calibrate", "--out", args.out, "--ranks", std::to_string(ranks), "--device",
               args.device, "--rank-output", part};
  if (args.quick) spec.argv.push_back("--quick");
  spec.echo_output = true;
  const LaunchResult result = launch_local(spec);
  if (result.exit_code != 0) die(kExitError, "calibrate: the collectives failed: " + describe_failure(result));
  std::ifstream in(part);
  nlohmann::json ranks_part = nlohmann::json::parse(in);
  std::filesystem::remove(part);
  return ranks_part;
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
  cmd->add_option("--device", args.device, "auto: the GPUs where any is visible, else the CPU")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--base", args.base,
                  "GPU: a published profile (profiles/*.json) whose collectives and inter-node figures are kept "
                  "where this machine cannot measure them (one GPU: no collectives)");
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
  const int gpus = visible_cuda_devices();
  CalibrateArgs resolved = args;
  if (resolved.device == "auto") resolved.device = gpus > 0 ? "cuda" : "cpu";
  if (resolved.device == "cuda" && gpus == 0) {
    die(kExitConfigError, "--device cuda: no CUDA device is visible");
  }
  const bool gpu = resolved.device == "cuda";
  if (!gpu && !args.base.empty()) die(kExitConfigError, "--base: only a GPU calibration keeps sections of a published profile");
  nlohmann::json base;
  if (gpu && !args.base.empty()) base = read_base_profile(args.base);
  // A GPU's collectives need two GPUs; with one they come from the base.
  const int ranks = args.ranks ? args.ranks : gpu ? std::min(gpus, 8) : std::clamp(2 * cores(), 2, 8);
  if (gpu && gpus < 2 && base.is_null()) {
    die(kExitConfigError, "one GPU measures no collectives: give --base profiles/<gpu>.json to take them (and the "
                          "inter-node figures) from a published profile");
  }
  if (gpu && ranks > gpus) die(kExitConfigError, fmt::format("--ranks {}: one rank per GPU, and {} are visible", ranks, gpus));
  if (!gpu && ranks > 4 * cores()) {
    die(kExitConfigError, fmt::format("--ranks {}: more than 4 ranks per core on this machine of {} cores", ranks,
                                      cores()));
  }
  check_out_path(args.out);
  const auto start = std::chrono::steady_clock::now();
  const double load_before = load_average();
  if (load_before > 0.5 * cores()) {
    log_error("calibrate: warning: the load average is {:.1f} on {} cores; other work running now slows every figure "
              "(a profile measured beside a compile came out 35% slower in GEMMs); calibrate on a quiet machine",
              load_before, cores());
  }
  std::string device = cpu_device_name();
  if (gpu) {
    options.device = select_gpu(LaunchEnv{});
    device = device_name(options.device);
    log_info("calibrate: GEMM, attention and memory-bound ops in bf16 on {}", device);
  } else {
    at::set_num_threads(1);  // one rank's compute, as the trainer's ranks run by default
    log_info("calibrate: GEMM, attention and memory-bound ops on one thread");
  }
  nlohmann::json profile = base.is_null() ? nlohmann::json{{"format", "hetpar-profile/1"}} : base;
  profile["gemm"] = measure_gemm(options);
  profile["attention"] = measure_attention(options);
  profile["memory_bound"] = measure_memory_bound(options);
  std::vector<std::string> measured = {"gemm", "attention", "memory_bound"};
  if (!gpu) {
    log_info("calibrate: whole layers of each module, forward and backward");
    profile["layers"] = measure_layers(options);
    measured.push_back("layers");
  }

  nlohmann::json ranks_part;
  if (!gpu || gpus >= 2) {
    ranks_part = collectives_on_local_ranks(resolved, ranks);
    profile["collectives"] = ranks_part.at("collectives");
    if (ranks_part.contains("shared_cores")) profile["shared_cores"] = ranks_part.at("shared_cores");
    measured.push_back("collectives");
  }
  profile["measured"] = {
      {"device", device}, {"cores", gpu ? 1 : cores()}, {"intra_op_threads", 1}, {"ranks", ranks},
      {"backend", gpu ? "nccl" : "gloo"}, {"commit", build_commit()}, {"hetpar_version", build_version()},
      {"torch_version", build_torch_version()}, {"date", utc_now()}, {"quick", args.quick},
      {"load_average_before", load_before}, {"sections", measured},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};
  if (gpu) {
    if (!args.base.empty()) profile["measured"]["base"] = args.base;
    // A GPU's own memory, a dense bf16 peak and activations in bf16 (plan/memory_model.hpp).
    const nlohmann::json meta = device_metadata(options.device);
    profile["memory"] = {{"bytes_per_device", meta["device_memory_mib"].get<double>() * (1 << 20)},
                         {"shared_by_all_ranks", false},
                         {"reserved_bytes", ranks_part.is_null() ? base.at("memory").at("reserved_bytes")
                                                                 : ranks_part.at("resident_bytes")}};
    profile["element_bytes"] = 2;
    profile["peak_flops_per_second"] = gpu_peak(options.device, /*bf16=*/true, /*tf32=*/false).flops_per_second;
    if (!profile.contains("gpus_per_node")) profile["gpus_per_node"] = gpus;
  } else {
    // Host memory, which every local rank shares, and what a rank holds before
    // its model (for the memory model, plan/memory_model.hpp).
    profile["memory"] = {{"bytes_per_device", total_memory_bytes()},
                         {"shared_by_all_ranks", true},
                         {"reserved_bytes", ranks_part.at("resident_bytes")}};
  }
  profile["attention_keeps_probabilities"] = grouped_query_attention_keeps_probabilities(options.device);
  profile["norm_backward_unfused"] = rms_norm_backward_is_unfused(options.device);
  profile["reduce_scatter_copies_input"] = reduce_scatter_copies_input(gpu ? "nccl" : "gloo");
  profile["gemm_adds_into_fp32"] = gemm_adds_into_fp32(options.device);
  write_file_atomic(args.out, profile.dump(2) + "\n");
  log_info("{}", summary_text(profile));
  log_info("calibrate: wrote {} in {:.0f} s", args.out, profile["measured"]["seconds"].get<double>());
  return 0;
}

}  // namespace hetpar
