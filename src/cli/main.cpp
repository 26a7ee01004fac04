// hetpar: one executable, one subcommand per job kind.
#include <CLI/CLI.hpp>

#include <csignal>

#include "cli/calibrate_command.hpp"
#include "cli/compare_command.hpp"
#include "cli/devices_command.hpp"
#include "cli/eval_command.hpp"
#include "cli/plan_command.hpp"
#include "cli/sweep_command.hpp"
#include "cli/train_command.hpp"
#include "config/config_error.hpp"
#include "metrics/cpu_tensor_memory.hpp"
#include "util/build_info.hpp"
#include "util/log.hpp"

int main(int argc, char** argv) {
  // Past a file-size limit a write must fail with an error hetpar reports
  // (naming the file), not kill the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  hetpar::quiet_torch_logging();
  // Before the first tensor, so every CPU tensor's storage counts toward the
  // steps' tensor peak (the CPU's counterpart of a GPU allocator's).
  hetpar::install_cpu_tensor_counter();
  CLI::App app{"hetpar: heterogeneous-parallel multimodal LLM trainer and benchmark suite"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(hetpar::build_version()) + " (commit " + hetpar::build_commit() +
                                        ", torch " + hetpar::build_torch_version() + ")");
  hetpar::TrainArgs train;
  hetpar::EvalArgs eval;
  CLI::App* train_cmd = hetpar::add_train_command(app, train);
  CLI::App* eval_cmd = hetpar::add_eval_command(app, eval);
  hetpar::CompareArgs compare;
  CLI::App* compare_cmd = hetpar::add_compare_command(app, compare);
  hetpar::SweepArgs sweep;
  CLI::App* sweep_cmd = hetpar::add_sweep_command(app, sweep);
  hetpar::CalibrateArgs calibrate;
  CLI::App* calibrate_cmd = hetpar::add_calibrate_command(app, calibrate);
  hetpar::PlanArgs plan;
  CLI::App* plan_cmd = hetpar::add_plan_command(app, plan);
  hetpar::DevicesArgs devices;
  CLI::App* devices_cmd = hetpar::add_devices_command(app, devices);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : hetpar::kExitConfigError;
  }
  try {
    if (train_cmd->parsed()) return hetpar::run_train(train);
    if (eval_cmd->parsed()) return hetpar::run_eval(eval);
    if (compare_cmd->parsed()) return hetpar::run_compare(compare);
    if (sweep_cmd->parsed()) return hetpar::run_sweep_command(sweep);
    if (calibrate_cmd->parsed()) return hetpar::run_calibrate(calibrate);
    if (plan_cmd->parsed()) return hetpar::run_plan(plan);
    if (devices_cmd->parsed()) return hetpar::run_devices(devices);
  } catch (const std::exception& e) {
    hetpar::die_of(e);
  }
  return 0;
}
