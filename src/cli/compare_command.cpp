#include "cli/compare_command.hpp"

#include <nlohmann/json.hpp>

#include "cli/finite_number.hpp"
#include "metrics/results_compare.hpp"
#include "metrics/run_summary.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {

CLI::App* add_compare_command(CLI::App& app, CompareArgs& args) {
  CLI::App* cmd = app.add_subcommand("compare", "Compare two runs' loss curves step by step (held-out losses too where both evaluated), or two sweeps' results");
  auto* a = cmd->add_option("run_a", args.run_a, "run directory or steps.jsonl");
  auto* b = cmd->add_option("run_b", args.run_b, "run directory or steps.jsonl (the reference)");
  cmd->add_option("--rtol", args.rtol, "largest allowed |a - b| / |b| at any step")
      ->check(kFiniteNumber)  // first: inf's message is plain too
      ->check(CLI::NonNegativeNumber);
  auto* results = cmd->add_option("--results", args.results, "OLD NEW: two sweeps' result directories")
                      ->expected(2)->excludes(a)->excludes(b);
  cmd->add_option("--threshold", args.threshold,
                  "with --results: a drop beyond this (5% or 0.05) and beyond the noise of the timed steps (its 95% "
                  "bootstrap interval below no change) is a regression")
      ->needs(results);
  a->needs(b);
  return cmd;
}

namespace {

int compare_result_sets(const CompareArgs& args) {
  double threshold = 0;
  ResultSet old_set, new_set;
  try {
    threshold = parse_threshold(args.threshold);
    old_set = read_result_set(args.results[0]);
    new_set = read_result_set(args.results[1]);
  } catch (const std::exception& e) {
    die(kExitConfigError, e.what());
  }
  const ResultsComparison c = compare_results(old_set, new_set, threshold);
  log_info("{}", c.text);
  if (c.matched == 0) die(kExitConfigError, "the two result sets share no point");
  return c.regressions > 0 ? kExitError : 0;
}

}  // namespace

int run_compare(const CompareArgs& args) {
  if (!args.results.empty()) return compare_result_sets(args);
  if (args.run_a.empty() || args.run_b.empty()) die(kExitConfigError, "compare needs RUN_A RUN_B or --results OLD NEW");
  std::vector<nlohmann::json> a, b;
  try {
    a = read_steps(args.run_a);
    b = read_steps(args.run_b);
  } catch (const std::runtime_error& e) {
    die(kExitConfigError, e.what());
  }
  const LossCurveDifference d = loss_curve_difference(a, b);
  // A diverged run never matches: its curve ends in NaN where the other's does not (or both broke).
  const std::optional<int64_t> diverged_a = diverged_step(a), diverged_b = diverged_step(b);
  for (const auto& [run, step] : {std::pair{args.run_a, diverged_a}, std::pair{args.run_b, diverged_b}}) {
    if (step) log_error("{} diverged at step {} (its loss became NaN or infinite)", run, *step);
  }
  if (diverged_a || diverged_b) {
    if (d.compared > 0) {
      log_info("{} steps before that compared: max relative difference {:.3g} (step {})", d.compared, d.max_rel,
               d.worst_step);
    }
    return kExitError;
  }
  if (d.compared == 0) die(kExitConfigError, "the two runs share no step");
  if (a.size() != b.size()) {
    log_error("warning: {} has {} steps, {} has {}; compared the {} they share", args.run_a, a.size(), args.run_b,
              b.size(), d.compared);
  }
  bool ok = d.max_rel <= args.rtol;
  log_info("{} steps compared: max |diff| {:.3g}, max relative {:.3g} (step {}), tolerance {:.3g}: {}", d.compared,
           d.max_abs, d.max_rel, d.worst_step, args.rtol, ok ? "within" : "EXCEEDED");
  // Held-out losses (run.eval_every) where both runs evaluated the same steps: held to the same tolerance.
  const LossCurveDifference held_out = loss_curve_difference(a, b, "eval_loss");
  if (held_out.compared > 0) {
    const bool within = held_out.max_rel <= args.rtol;
    log_info("{} held-out evaluations compared: max |diff| {:.3g}, max relative {:.3g} (step {}), tolerance {:.3g}: {}",
             held_out.compared, held_out.max_abs, held_out.max_rel, held_out.worst_step, args.rtol,
             within ? "within" : "EXCEEDED");
    ok = ok && within;
  }
  return ok ? 0 : kExitError;
}

}  // namespace hetpar
