#include "cli/sweep_command.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "cli/build_paths.hpp"
#include "cli/finite_number.hpp"
#include "cli/job_command.hpp"
#include "launch/local_limits.hpp"
#include "sweep/sweep_dir.hpp"
#include "util/durable_file.hpp"
#include "config/config_error.hpp"
#include "data/data_sources.hpp"
#include "metrics/model_flops.hpp"
#include "sweep/sweep_runner.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

// The plots need the venv's python (matplotlib); HETPAR_PYTHON overrides it.
std::string plot_python() {
  if (const char* env = std::getenv("HETPAR_PYTHON")) return env;
  return configured_python();
}

std::string layout_text(const RunConfig& c) {
  const ModulePlacement& p = c.placement;
  return fmt::format("{} enc {} [{},{}) llm {} [{},{})", to_string(p.placement), p.encoder.to_string(),
                     p.encoder_ranks.offset, p.encoder_ranks.end(), p.llm.to_string(), p.llm_ranks.offset,
                     p.llm_ranks.end());
}

// Why the local launcher cannot start run `r` on this machine; "" when it can.
std::string local_problem(const SweepRun& r) {
  const std::string why =
      local_rank_count_problem(*r.config, r.world_size, /*oversubscribe=*/false, "run it with --launch on a cluster");
  return why.empty() ? local_memory_problem(*r.config, r.world_size) : why;
}

// Drops the config of each run `problem_of` names a problem of (it may also
// refine the config), and of each point whose baseline it dropped (a
// baseline comes before its points).
void invalidate(std::vector<SweepRun>& runs, const std::function<std::string(SweepRun&)>& problem_of) {
  std::map<std::string, std::string> invalid_baselines;
  for (SweepRun& r : runs) {
    if (!r.config) continue;
    std::string why = problem_of(r);
    if (why.empty() && !r.is_baseline && invalid_baselines.count(r.baseline_id)) {
      why = "its baseline is invalid: " + invalid_baselines[r.baseline_id];
    }
    if (why.empty()) continue;
    if (r.is_baseline) invalid_baselines[r.id] = why;
    r.invalid_reason = why;
    r.config.reset();
  }
}

// Runs on the local launcher get this machine alone, one after another: a
// point that needs more ranks or memory than it has is invalid, like a
// layout that does not multiply out (and so is a point whose baseline is).
void refuse_what_this_machine_cannot_host(std::vector<SweepRun>& runs) { invalidate(runs, local_problem); }

// Runs on data.files count the files' images (from their headers) in the dry
// run's FLOPs and the predictions; a run whose files cannot be read is
// invalid, and so is a point whose baseline's cannot.
void count_file_images(std::vector<SweepRun>& runs) {
  invalidate(runs, [](SweepRun& r) {
    try {
      r.config = with_file_image_counts(*r.config);
      return std::string();
    } catch (const std::runtime_error& e) {
      return std::string("data.files: ") + e.what();
    }
  });
}

// A dry run plans for any machine (a cluster's, with --launch); it says which
// runs this one could not host on the local launcher, but lists them as valid.
// It lists one round; `repeats` says how many there would be.
int dry_run(const SweepSpec& spec, const std::vector<SweepRun>& runs, bool local, int repeats) {
  int points = 0, valid = 0, baselines = 0, too_big_here = 0;
  log_info("sweep {} ({}): base run {}", spec.name, spec.file, spec.base);
  log_info("{:<5} {:<44} {:>5} {:>12}  {:<8} {}", "run", "label", "ranks", "FLOPs/step", "baseline", "layout");
  for (const SweepRun& r : runs) {
    r.is_baseline ? ++baselines : ++points;
    if (!r.config) {
      log_info("{:<5} {:<44} INVALID: {}", r.id, r.label, r.invalid_reason);
      continue;
    }
    valid += !r.is_baseline;
    too_big_here += local && !local_problem(r).empty();
    const double flops =
        step_flops(*r.config, static_cast<int64_t>(expected_images_per_step(*r.config) + 0.5)).total();
    log_info("{:<5} {:<44} {:>5} {:>12.4e}  {:<8} {}", r.id, r.label, r.world_size, flops,
             r.is_baseline ? "-" : r.baseline_id, layout_text(*r.config));
  }
  log_info("{} points ({} valid, {} invalid), {} baselines; model FLOPs per step at the expected images per step",
           points, valid, points - valid, baselines);
  if (repeats > 1) {
    log_info("--repeat {}: every valid run is measured {} times, in rounds (ids p001, p001r2, ... p001r{}): {} runs",
             repeats, repeats, repeats, repeat_runs(runs, repeats).size());
  }
  if (too_big_here > 0) {
    log_info("{} of these runs need more ranks or memory than this machine has: run them with --launch on a cluster",
             too_big_here);
  }
  return valid > 0 ? 0 : kExitConfigError;
}

}  // namespace

CLI::App* add_sweep_command(CLI::App& app, SweepArgs& args) {
  CLI::App* cmd = app.add_subcommand("sweep", "Run (or --dry-run) a sweep of configurations against their baselines");
  cmd->add_option("file", args.file, "sweep file (TOML: [sweep] and [[axis]] tables)")->required();
  cmd->add_option("--out", args.out_dir, "results directory (default results/sweeps/<sweep name>)");
  cmd->add_option("--set", args.overrides, "override a key of every run: --set run.steps=5 (repeatable)");
  cmd->add_option("--launch", args.launch,
                  "start each run's ranks with this prefix instead of the local launcher; {ranks} is replaced, "
                  "e.g. \"srun -n {ranks}\" or \"torchrun --nproc-per-node {ranks} --no-python\"");
  cmd->add_flag("--dry-run", args.dry_run, "validate and list the points with ranks and FLOPs; run nothing");
  cmd->add_flag("--fresh", args.fresh,
                "discard earlier results instead of resuming (only in a directory an earlier hetpar sweep made)");
  cmd->add_flag("--retry-failed", args.retry_failed, "when resuming, run again the runs that failed, diverged or ran out of memory");
  cmd->add_flag("--no-plots", args.no_plots, "skip drawing the figures");
  cmd->add_option("--run-timeout", args.run_timeout_s, "seconds one run may take before it is killed")
      ->check(kFiniteNumber)  // first: inf's message is plain too
      ->check(CLI::PositiveNumber);
  cmd->add_option("--repeat", args.repeat,
                  "measure every point and baseline K times, in rounds (runs p001, p001r2, ...); the report and "
                  "compare --results pool the repeats")
      ->check(CLI::Range(1, 99));
  cmd->add_option("--profile", args.profile,
                  "a profile from hetpar calibrate: the report and results.csv set each run's predicted step time "
                  "(plan/step_model) beside the measured one");
  return cmd;
}

int run_sweep_command(const SweepArgs& args) {
  SweepSpec spec;
  try {
    spec = load_sweep_spec(args.file);
  } catch (const ConfigError& e) {
    die(kExitConfigError, e.what());
  }
  std::optional<Profile> profile;
  if (!args.profile.empty()) {  // read before anything runs: a bad profile wastes no measurement
    try {
      profile = Profile::load(args.profile);
    } catch (const std::runtime_error& e) {
      die(kExitConfigError, e.what());
    }
  }
  std::vector<SweepRun> runs = expand_sweep(spec, args.overrides);
  count_file_images(runs);
  if (args.dry_run) return dry_run(spec, runs, args.launch.empty(), args.repeat);
  // Rounds first: the repeats of a run measured elsewhere (--launch) keep
  // their ids here, and so their records, where this machine cannot host them.
  runs = repeat_runs(runs, args.repeat);
  if (args.launch.empty()) refuse_what_this_machine_cannot_host(runs);
  bool any_valid = false;
  for (const SweepRun& r : runs) {
    if (!r.config && r.repeat == 1) log_error("skipping {} ({}): {}", r.id, r.label, r.invalid_reason);
    any_valid |= r.config.has_value();
  }
  if (!any_valid) die(kExitConfigError, "no valid point in " + args.file);
  SweepOptions options;
  options.out_dir = args.out_dir.empty() ? "results/sweeps/" + spec.name : args.out_dir;
  options.hetpar_binary = self_executable();
  options.fresh = args.fresh;
  options.launch = args.launch;
  options.run_timeout_s = args.run_timeout_s;
  if (!args.no_plots) {
    options.python = plot_python();
    options.plot_script = configured_source_tree() + "/plots/plot_results.py";
  }
  options.retry_failed = args.retry_failed;
  if (profile) options.profile = &*profile;
  try {
    return run_sweep(spec, runs, options);
  } catch (const SweepDirError& e) {
    die(kExitConfigError, e.what());
  } catch (const FileError& e) {
    die(kExitError, e.what());
  } catch (const std::runtime_error& e) {
    die(kExitConfigError, e.what());
  }
}

}  // namespace hetpar
