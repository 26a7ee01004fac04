#include "cli/job_command.hpp"

#include <filesystem>

#include "config/device_choice.hpp"
#include "dist/device.hpp"
#include "interop/hf_model_config.hpp"
#include "launch/local_launcher.hpp"
#include "launch/local_limits.hpp"
#include "util/log.hpp"

namespace hetpar {
std::string self_executable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this executable: " + ec.message());
  return path.string();
}

void add_job_options(CLI::App& cmd, JobArgs& args, bool config_required) {
  cmd.add_option("config", args.config,
                 config_required ? "run file (TOML)" : "run file (TOML); without one the model is --init-hf's")
      ->required(config_required);
  cmd.add_option("--set", args.overrides, "override one key of the run file: --set layout.llm.tp=2 (repeatable)");
  cmd.add_option("--nproc", args.nproc,
                 "spawn this many local ranks (default: as many as the layout needs); "
                 "not used under torchrun/srun, which set RANK/WORLD_SIZE")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_flag("--oversubscribe", args.oversubscribe,
               "let the local launcher start more than 4 ranks per core (refused otherwise: a mistyped layout "
               "must not start thousands of processes)");
  cmd.footer("\nTHE RUN FILE\n" + describe_run_file());
}

namespace {

// The run file, or with --init-hf and no run file the checkpoint's config.json;
// either way the model must be the checkpoint's.
RunConfig load_job_config(const JobArgs& args, bool say_notes) {
  if (args.hf_model_dir.empty()) return load_run_config(args.config, args.overrides);
  const HfModelConfig hf = read_hf_model_config(args.hf_model_dir);
  hf_weight_files(args.hf_model_dir);  // the weights are there, before any rank starts
  if (say_notes) {
    for (const std::string& note : hf.notes) log_info("{}: {}", hf.file, note);
  }
  RunConfig config = load_run_config_over(hf_model_toml(hf), hf.file, args.config, args.overrides);
  check_matches_hf_model(config, hf);
  return config;
}

}  // namespace

int run_job(const std::string& subcommand, const JobArgs& args, const std::vector<std::string>& rank_args,
            const std::function<int(const RunConfig&, const LaunchEnv&)>& rank_main, const Preflight& preflight) {
  std::optional<LaunchEnv> env;
  RunConfig config;
  try {
    env = read_launch_env();
  } catch (const std::exception& e) {
    die(kExitConfigError, std::string("launch environment: ") + e.what());
  }
  try {
    // Said once: by the local launcher, or by rank 0 of an outside one.
    config = load_job_config(args, !env || (env->rank == 0 && env->launcher != "local"));
    const int gpus = visible_cuda_devices();
    resolve_device(config, gpus);
    // The local launcher starts every rank on this node: one GPU each.
    if (!env && config.runtime.device == "cuda") cuda_device_index(0, config.placement.world_size, gpus);
    check_trainer_supports(config);
    if (env && args.nproc && args.nproc != env->world_size) {
      throw ConfigError("--nproc", "--nproc",
                        "the launcher started " + std::to_string(env->world_size) + " ranks; drop --nproc");
    }
    check_world_size(config, env ? env->world_size : (args.nproc ? args.nproc : config.placement.world_size));
    // Under torchrun/srun this rank alone must fit; the local launcher hosts them all.
    const int ranks_here = env ? 1 : config.placement.world_size;
    if (!env) {
      if (const std::string why = local_rank_count_problem(config, ranks_here, args.oversubscribe,
                                                           "pass --oversubscribe to start them anyway");
          !why.empty()) {
        throw ConfigError(config.source_file, "layout", why);
      }
    }
    // On a GPU the model lives in device memory, which the device's allocator guards.
    if (const std::string why = config.runtime.device == "cpu" ? local_memory_problem(config, ranks_here) : "";
        !why.empty()) {
      throw ConfigError(config.source_file, estimate_rank_memory(config).module, why);
    }
    // Once per job: by the local launcher before it starts the ranks, or by rank 0 of an outside one.
    if (preflight && (!env || (env->rank == 0 && env->launcher != "local"))) preflight(config);
  } catch (const ConfigError& e) {
    die(kExitConfigError, std::string("config: ") + e.what() + (args.settings_note.empty() ? "" : " (" + args.settings_note + ")"));
  }
  if (env) {
    set_log_rank(env->rank);
    return rank_main(config, *env);
  }

  LocalLaunchSpec spec;
  spec.nproc = config.placement.world_size;
  spec.argv = {self_executable(), subcommand};
  if (!args.config.empty()) spec.argv.push_back(args.config);
  for (const auto& o : args.overrides) spec.argv.insert(spec.argv.end(), {"--set", o});
  spec.argv.insert(spec.argv.end(), rank_args.begin(), rank_args.end());
  spec.intra_op_threads = static_cast<int>(config.runtime.intra_op_threads);
  spec.grace = std::chrono::milliseconds(static_cast<int64_t>(config.runtime.timeout_s * 1000) + 5000);
  log_info("hetpar: launching {} local ranks for {}", spec.nproc, config.source_file);
  const LaunchResult result = launch_local(spec);
  if (result.exit_code == kExitDiverged) {
    log_error("the run diverged after {:.1f} s (exit code {}); its steps and summary record where", result.wall_seconds,
              kExitDiverged);
  } else if (result.exit_code != 0) {
    log_error("job failed after {:.1f} s: {}", result.wall_seconds, describe_failure(result));
  }
  return result.exit_code;
}

}  // namespace hetpar
