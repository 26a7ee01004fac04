// The planner behind `hetpar plan`: every valid layout x placement of a run's
// model on N devices (each module's TP, CP, PP, DP; uniform, colocated, and
// non-colocated with every split of the devices and each useful run-ahead),
// each predicted by the step-time model (plan/op_times.hpp) and its memory
// (plan/memory_model.hpp), those that do not fit the profile's memory
// dropped, the rest ranked. The model and data settings (batch, sequence,
// images) stay the run file's: only where the modules go changes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "plan/memory_model.hpp"
#include "plan/profile.hpp"
#include "plan/step_model.hpp"

namespace hetpar {

enum class PlanObjective { kTokens, kTflops };
PlanObjective parse_plan_objective(const std::string& name);  // "tokens" | "tflops"; throws naming the choices

struct PlanOptions {
  int devices = 0;
  PlanObjective objective = PlanObjective::kTokens;
  int top = 5;
  // Non-colocated run-ahead tried: from the LLM's pp (the least it may be)
  // to this many more, no further than the step's micro-batches.
  int extra_run_ahead = 2;
  // Simulate every candidate, instead of skipping those whose lower bound
  // shows they can make neither the top nor their placement's best (tests).
  bool exhaustive = false;
  // A layout that does not fit the memory as the run file says is tried with
  // run.recompute = "full" in the LLM alone, the encoder alone and both
  // (run.recompute_modules), each with the fewest recomputed layers a stage
  // (run.recompute_layers) that fit: each recomputed layer only adds work.
  // Of those that fit, the one with the least lower bound of the step.
  bool recompute_where_needed = false;
  // Every LLM layout with tp > 1 is tried with and without sequence
  // parallelism (layout.llm.sp), whatever the run file says.
  bool search_sequence_parallel = false;
};

// Every candidate layout whose config is valid (layout_problem finds
// nothing), in a fixed order: uniform, colocated, non-colocated by encoder
// devices; within each, by encoder then LLM layout. The LLM's sequence
// parallelism is the run file's, or where `search_sequence_parallel` both
// (without it first).
std::vector<LayoutConfig> enumerate_layouts(const RunConfig& base, int devices, int extra_run_ahead,
                                            bool search_sequence_parallel = false);

struct PlanCandidate {
  LayoutConfig layout;
  bool recompute = false;      // run.recompute = "full" in this candidate
  int64_t recompute_layers = 0;  // and its run.recompute_layers (0: every layer)
  std::string recompute_modules = "both";  // and its run.recompute_modules
  StepPrediction step;
  double tokens_per_second = 0, tflops_per_device = 0;
  RankMemory fullest;          // the rank with the most memory
  double memory_needed = 0;    // against the profile: the fullest rank, or all ranks where they share it
  double speedup = 0;          // objective over the best uniform candidate's (0 when none fits)
  double speedup_over_llm_centric = 0;  // over Plan::llm_centric's (0 when none fits)
};

struct Plan {
  int devices = 0;
  PlanObjective objective = PlanObjective::kTokens;
  bool searched_sequence_parallel = false;  // PlanOptions::search_sequence_parallel
  int64_t enumerated = 0, fitting = 0;
  std::vector<PlanCandidate> top;  // the best `top` fitting, best first
  std::optional<PlanCandidate> best_uniform, best_colocated, best_non_colocated;
  std::optional<PlanCandidate> given;  // the run file's own layout, when it takes N devices (fitting or not)
  // The LLM-centric baseline: the uniform layout best for the LLM alone (its
  // step without images), which the encoder then inherits. How a homogeneous
  // baseline is usually chosen, and weaker than best_uniform.
  std::optional<PlanCandidate> llm_centric;
  double search_seconds = 0;
};

// Throws std::invalid_argument when no layout fits the profile's memory
// (saying the least any needs), or options are out of range.
Plan plan_layouts(const RunConfig& base, const Profile& profile, const PlanOptions& options);

// The fewest of each stage's first layers that recompute and fit, as
// run.recompute_layers (0: all of them, also where even all do not fit), for
// `c` (placement resolved); `fits_with(layers)` measures one setting.
int64_t fewest_recomputed_layers_that_fit(const RunConfig& c, const std::function<bool(int64_t)>& fits_with);

// `base` with `layout` in place, placement resolved.
RunConfig with_layout(const RunConfig& base, const LayoutConfig& layout);

}  // namespace hetpar
