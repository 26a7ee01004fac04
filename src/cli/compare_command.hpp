// `hetpar compare RUN_A RUN_B [--rtol X]`: loss-curve parity of two runs,
// step by step; exits 1 past the tolerance (2 on unreadable input).
// `hetpar compare --results OLD NEW [--threshold 5%]`: two sweeps' results
// point by point (two GPUs, two commits), on the timed steps of their runs;
// exits 1 when a point regressed beyond the threshold and beyond the noise.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace hetpar {

struct CompareArgs {
  std::string run_a, run_b;  // run directories (holding steps.jsonl) or steps.jsonl files
  double rtol = 1e-5;
  std::vector<std::string> results;  // OLD NEW: result directories or results.jsonl files
  std::string threshold = "5%";
};

CLI::App* add_compare_command(CLI::App& app, CompareArgs& args);
int run_compare(const CompareArgs& args);

}  // namespace hetpar
