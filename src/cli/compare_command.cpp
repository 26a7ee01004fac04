#include "cli/compare_command.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

// step -> loss of a run's steps.jsonl (a directory holding it, or the file).
std::map<int64_t, double> read_losses(const std::string& run) {
  const std::string path = std::filesystem::is_directory(run) ? run + "/steps.jsonl" : run;
  std::ifstream in(path);
  if (!in) die(kExitConfigError, "cannot read " + path);
  std::map<int64_t, double> losses;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    try {
      const auto j = nlohmann::json::parse(line);
      losses[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
    } catch (const std::exception& e) {
      die(kExitConfigError, fmt::format("{}:{}: not a step record with step and loss: {}", path, line_number, e.what()));
    }
  }
  if (losses.empty()) die(kExitConfigError, path + ": no steps");
  return losses;
}

}  // namespace

CLI::App* add_compare_command(CLI::App& app, CompareArgs& args) {
  CLI::App* cmd = app.add_subcommand("compare", "Compare two runs' loss curves step by step");
  cmd->add_option("run_a", args.run_a, "run directory or steps.jsonl")->required();
  cmd->add_option("run_b", args.run_b, "run directory or steps.jsonl (the reference)")->required();
  cmd->add_option("--rtol", args.rtol, "largest allowed |a - b| / |b| at any step")->check(CLI::NonNegativeNumber);
  return cmd;
}

int run_compare(const CompareArgs& args) {
  const auto a = read_losses(args.run_a), b = read_losses(args.run_b);
  double max_abs = 0, max_rel = 0;
  int64_t worst_step = 0, compared = 0;
  for (const auto& [step, loss_b] : b) {
    const auto it = a.find(step);
    if (it == a.end()) continue;
    ++compared;
    const double abs_diff = std::abs(it->second - loss_b);
    const double rel_diff = abs_diff / std::max(std::abs(loss_b), 1e-30);
    max_abs = std::max(max_abs, abs_diff);
    if (rel_diff >= max_rel) max_rel = rel_diff, worst_step = step;
  }
  if (compared == 0) die(kExitConfigError, "the two runs share no step");
  if (a.size() != b.size()) {
    log_error("warning: {} has {} steps, {} has {}; compared the {} they share", args.run_a, a.size(), args.run_b,
              b.size(), compared);
  }
  const bool ok = max_rel <= args.rtol;
  log_info("{} steps compared: max |diff| {:.3g}, max relative {:.3g} (step {}), tolerance {:.3g}: {}", compared,
           max_abs, max_rel, worst_step, args.rtol, ok ? "within" : "EXCEEDED");
  return ok ? 0 : kExitError;
}

}  // namespace hetpar
