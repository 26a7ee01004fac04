#include "cli/plan_command.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "config/config_error.hpp"
#include "data/data_sources.hpp"
#include "plan/memory_model.hpp"
#include "plan/op_times.hpp"
#include "plan/plan_report.hpp"
#include "plan/planner.hpp"
#include "util/durable_file.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"
#include "util/output_dir.hpp"
#include "util/plain_name.hpp"

namespace hetpar {
namespace {

// A plan directory from before plans were marked: its plan.json says it is one.
bool earlier_unmarked_plan(const std::string& dir) {
  return json_format((std::filesystem::path(dir) / "plan.json").string()) == "hetpar-plan/1";
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, PlanArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Rank every layout and placement of a run's model on N devices by the step-time model, and write a "
              "sweep of the best to measure them");
  cmd->add_option("run", args.run_file, "run file (TOML): the model and data; its layout is replaced")->required();
  cmd->add_option("--devices", args.devices, "devices (ranks) to plan for (at most 65536: 16384 take ~12 s)")
      ->required()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--profile", args.profile, "step-time profile: hetpar calibrate's, or profiles/*.json")
      ->capture_default_str();
  cmd->add_option("--top", args.top, "candidates to print and put in the sweep")->capture_default_str()->check(
      CLI::Range(1, 1000));
  cmd->add_option("--objective", args.objective, "rank by tokens/s or TFLOPS/device")
      ->capture_default_str()
      ->check(CLI::IsMember({"tokens", "tflops"}));
  cmd->add_flag("--recompute-where-needed", args.recompute_where_needed,
                "try a layout that does not fit the memory again with run.recompute = full (each layer's forward "
                "again in its backward): more layouts fit, each at the step it then takes");
  cmd->add_flag("--search-sequence-parallel", args.search_sequence_parallel,
                "try each LLM layout with tp > 1 with and without sequence parallelism (layout.llm.sp), whatever the "
                "run file sets");
  cmd->add_option("--set", args.overrides, "override a run-file key: dotted.key=value (repeatable)");
  cmd->add_option("--label", args.labels, "key=value to record in plan.json (repeatable)");
  cmd->add_option("--out", args.out, "directory for plan.json, base.toml, sweep.toml (default results/plans/RUN-N)");
  return cmd;
}

int run_plan(const PlanArgs& args) {
  RunConfig base;
  std::optional<FileImageCounts> file_images;
  try {
    base = load_run_config(args.run_file, args.overrides);
    file_images = check_data_files(base);
  } catch (const ConfigError& e) {
    die(kExitConfigError, e.what());
  }
  base = with_file_image_counts(base, file_images);  // the files' images, not the synthetic data's, are planned for
  std::map<std::string, std::string> labels;
  for (const std::string& label : args.labels) {
    const size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0) die(kExitConfigError, "--label " + label + ": expected key=value");
    const std::string key = label.substr(0, eq);
    if (const std::string why = plain_name_problem(key); !why.empty()) die(kExitConfigError, "--label " + label + ": the key " + why);
    labels[key] = label.substr(eq + 1);
  }
  Profile profile;
  try {
    profile = Profile::load(args.profile);
  } catch (const std::exception& e) {
    die(kExitConfigError, std::string("--profile: ") + e.what());
  }
  if (const std::string why = precision_problem(base, profile); !why.empty()) {
    die(kExitConfigError, "--profile " + args.profile + ": " + why);
  }
  const std::string out = args.out.empty() ? fmt::format("results/plans/{}-{}", base.run.name, args.devices) : args.out;
  if (const std::string why = output_dir_problem(out, plan_outputs()); !why.empty() && !earlier_unmarked_plan(out)) {
    die(kExitConfigError, "--out: " + why);
  }
  if (file_images) {
    log_info("{} images a sample on average{}, from the headers of {}; the memory model counts {} a sample{}",
             file_images->mean, file_images->most ? fmt::format(", the fullest {} (image_counts)", *file_images->most) : "",
             base.data.files, most_images_per_sample(base), file_images->most ? "" : " (data.images_max)");
  }
  PlanOptions options;
  options.devices = args.devices;
  options.top = args.top;
  options.objective = parse_plan_objective(args.objective);
  options.recompute_where_needed = args.recompute_where_needed;
  options.search_sequence_parallel = args.search_sequence_parallel;
  Plan plan;
  try {
    plan = plan_layouts(base, profile, options);
  } catch (const std::invalid_argument& e) {
    die(kExitConfigError, fmt::format("{}: {}", args.run_file, e.what()));
  }
  // Marked only once there is a plan to write: a refused search leaves nothing behind.
  try {
    mark_output_dir(out, plan_outputs());
  } catch (const std::exception& e) {
    die(kExitConfigError, std::string("--out: ") + e.what());
  }
  fmt::print("{}", plan_table(plan, args.profile));
  write_file_atomic(out + "/plan.json", plan_json(plan, base, args.profile, labels).dump(1) + "\n");
  write_file_atomic(out + "/base.toml", to_toml(base));
  write_file_atomic(out + "/sweep.toml", plan_sweep_toml(plan, base, "base.toml"));
  fmt::print("\nwrote {0}/plan.json and {0}/sweep.toml; measure the prediction with: hetpar sweep {0}/sweep.toml\n", out);
  return 0;
}

}  // namespace hetpar
