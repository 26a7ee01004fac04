// `hetpar plan RUN.toml --devices N [--profile FILE] [--top K] [--objective
// tokens|tflops] [--recompute-where-needed] [--search-sequence-parallel]
// [--set k=v]... [--label k=v]... [--out DIR]`: ranks every
// layout x placement of the run's model on N devices by the step-time model
// (plan/planner.hpp), prints the best beside the best uniform baseline, and
// writes DIR/plan.json, DIR/base.toml (the resolved run) and DIR/sweep.toml
// (the top K and that baseline, for `hetpar sweep` to measure).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace hetpar {

struct PlanArgs {
  std::string run_file;
  int devices = 0;
  std::string profile = "results/profile.json";
  int top = 5;
  std::string objective = "tokens";
  std::vector<std::string> overrides;
  std::vector<std::string> labels;  // key=value, copied into plan.json
  std::string out;                  // default results/plans/<run name>-<devices>
  bool recompute_where_needed = false;
  bool search_sequence_parallel = false;
};

CLI::App* add_plan_command(CLI::App& app, PlanArgs& args);
int run_plan(const PlanArgs& args);

}  // namespace hetpar
