#include "train/train_job.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dist/module_groups.hpp"
#include "dist/runtime.hpp"
#include "train/comm_check.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

using Clock = std::chrono::steady_clock;

// HETPAR_FAULT=RANK:STEP makes that rank die abruptly at that step: the way
// tests check that a lost rank ends the whole job with a clear report.
void maybe_inject_fault(int rank, int64_t step) {
  const char* spec = std::getenv("HETPAR_FAULT");
  int fault_rank = -1;
  long long fault_step = -1;
  if (spec && std::sscanf(spec, "%d:%lld", &fault_rank, &fault_step) == 2 && fault_rank == rank &&
      fault_step == step) {
    log_error("HETPAR_FAULT: rank {} exits abruptly at step {}", rank, step);
    _exit(kExitInjectedFault);
  }
}

std::string describe_rank(JobGroups& g, int rank) {
  std::string s = fmt::format("rank {}:", rank);
  for (ModuleGroups* m : {&g.encoder(), &g.llm()}) {
    if (!m->active()) continue;
    const GridCoord c = m->coord();
    s += fmt::format(" {}(tp{} cp{} dp{} pp{})", m->module(), c.tp, c.cp, c.dp, c.pp);
  }
  return s;
}

nlohmann::json run_metadata(const RunConfig& config, const Runtime& runtime) {
  return {{"hetpar_version", HETPAR_VERSION},
          {"commit", HETPAR_GIT_COMMIT},
          {"torch_version", HETPAR_TORCH_VERSION},
          {"backend", runtime.backend()},
          {"world_size", runtime.world_size()},
          {"placement", to_string(config.placement.placement)},
          {"layout_encoder", config.placement.encoder.to_string()},
          {"layout_llm", config.placement.llm.to_string()},
          {"run", config.run.name},
          {"seed", config.run.seed}};
}

}  // namespace

int run_train_job(const RunConfig& config, const LaunchEnv& env, const std::string& out_dir) {
  RuntimeOptions options;
  options.backend = config.runtime.backend;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.runtime.timeout_s * 1000));
  options.intra_op_threads = static_cast<int>(config.runtime.intra_op_threads);
  Runtime runtime(env, options);
  JobGroups groups(runtime, config.placement);
  const bool leader = runtime.rank() == 0;

  std::ofstream steps_file;
  if (leader) {
    std::filesystem::create_directories(out_dir);
    std::ofstream(out_dir + "/config.toml") << to_toml(config);
    steps_file.open(out_dir + "/steps.jsonl");
    log_info("resolved run configuration:\n{}", to_toml(config));
    log_info("{} ranks, backend {}, launched by {}", runtime.world_size(), runtime.backend(), env.launcher);
    log_info("this build has no model yet: each step checks every process group of both modules");
  }
  log_info("{}", describe_rank(groups, runtime.rank()));

  double total_seconds = 0;
  int64_t total_checks = 0;
  for (int64_t step = 1; step <= config.run.steps; ++step) {
    maybe_inject_fault(runtime.rank(), step);
    const auto t0 = Clock::now();
    at::Tensor checks = at::full({1}, check_job_groups(runtime, groups, static_cast<int>(step)), at::kLong);
    runtime.world().all_reduce(checks);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    total_seconds += seconds;
    total_checks += checks.item<int64_t>();
    if (leader) {
      nlohmann::json line = {{"step", step}, {"step_seconds", seconds},
                             {"collectives_checked", checks.item<int64_t>()}};
      steps_file << line.dump() << "\n" << std::flush;
      log_info("step {:>4} | {:8.2f} ms | {} collectives checked on all ranks", step, seconds * 1e3,
               checks.item<int64_t>());
    }
  }
  if (leader) {
    nlohmann::json summary = run_metadata(config, runtime);
    summary["steps"] = config.run.steps;
    summary["mean_step_seconds"] = total_seconds / static_cast<double>(config.run.steps);
    summary["collectives_checked"] = total_checks;
    std::ofstream(out_dir + "/summary.json") << summary.dump(2) << "\n";
    log_info("done: {} steps, results in {}/", config.run.steps, out_dir);
  }
  return 0;
}

}  // namespace hetpar
