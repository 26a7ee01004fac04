// The planner: its enumeration against a brute-force list (every layout
// tuple of each module through the run-file loader, the same rules a user's
// file meets), its ranking and baseline, its errors, and the sweep it writes
// loading as a sweep.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <set>

#include "config/config_error.hpp"
#include "plan/op_times.hpp"
#include "plan/plan_report.hpp"
#include "plan/planner.hpp"
#include "sweep/sweep_spec.hpp"
#include "tests/plan_fixtures.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

const std::string kTiny = source_tree_path("/workloads/tiny.toml");

RunConfig tiny(const std::vector<std::string>& sets = {}) { return planning_run(sets); }

std::string key(const LayoutConfig& l) {
  return to_string(l.placement) + " " + l.encoder.to_string() + " " + l.llm.to_string() + " ahead " +
         std::to_string(l.placement == Placement::NonColocated ? l.run_ahead : 0);
}

std::string tuple(const Layout& l) {
  return "{ tp = " + std::to_string(l.tp) + ", cp = " + std::to_string(l.cp) + ", pp = " + std::to_string(l.pp) +
         ", dp = " + std::to_string(l.dp) + " }";
}

// Every (tp, cp, pp, dp) in [1, n]^4 whose product is n.
std::vector<Layout> all_tuples(int n) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= n; ++tp)
    for (int cp = 1; cp <= n; ++cp)
      for (int pp = 1; pp <= n; ++pp)
        for (int dp = 1; dp <= n; ++dp)
          if (tp * cp * pp * dp == n) out.push_back({tp, cp, pp, dp});
  return out;
}

// The layouts the run-file loader and the trainer's support check accept, by brute force.
std::set<std::string> brute_force(int devices, const std::vector<std::string>& sets) {
  std::set<std::string> valid;
  const auto offer = [&](const std::string& placement, const Layout* encoder, const Layout& llm, int64_t ahead) {
    std::vector<std::string> o = kPlanningSets;
    o.insert(o.end(), sets.begin(), sets.end());
    o.push_back("layout.placement=\"" + placement + "\"");
    if (encoder) o.push_back("layout.encoder=" + tuple(*encoder));
    o.push_back("layout.llm=" + tuple(llm));
    o.push_back("layout.run_ahead=" + std::to_string(ahead));
    try {
      const RunConfig c = load_run_config(kTiny, o);
      check_trainer_supports(c);
      valid.insert(key(c.layout));
    } catch (const ConfigError&) {
    }
  };
  for (const Layout& llm : all_tuples(devices)) {
    offer("uniform", nullptr, llm, 2);
    for (const Layout& enc : all_tuples(devices)) offer("colocated", &enc, llm, 2);
  }
  for (int e = 1; e < devices; ++e) {
    for (const Layout& enc : all_tuples(e)) {
      for (const Layout& llm : all_tuples(devices - e)) {
        for (int64_t ahead = 1; ahead <= 12; ++ahead) offer("non-colocated", &enc, llm, ahead);
      }
    }
  }
  return valid;
}

TEST(Planner, EnumeratesWhatABruteForceSearchFinds) {
  for (const auto& sets : {std::vector<std::string>{}, std::vector<std::string>{"llm.seq_len=132", "llm.kv_heads=4"}}) {
    for (int devices : {1, 2, 3, 4, 6}) {
      const RunConfig base = planning_run(sets);
      const std::vector<LayoutConfig> planned = enumerate_layouts(base, devices, 2);
      std::set<std::string> found;
      for (const LayoutConfig& l : planned) EXPECT_TRUE(found.insert(key(l)).second) << "listed twice: " << key(l);
      const std::set<std::string> valid = brute_force(devices, sets);
      // Every planned layout is valid; every valid one is planned, run-ahead
      // aside: the planner tries the least (the LLM's pp) to 2 more.
      std::set<std::string> valid_planned_range;
      for (const LayoutConfig& l : planned) EXPECT_TRUE(valid.count(key(l))) << "not valid: " << key(l);
      for (const std::string& v : valid) {
        const size_t at = v.rfind(" ahead ");
        const std::string placement_and_layouts = v.substr(0, at);
        bool listed = false;
        for (const std::string& f : found) listed = listed || f.rfind(placement_and_layouts + " ahead ", 0) == 0;
        EXPECT_TRUE(listed) << devices << " devices: the brute force finds " << v << ", the planner does not";
      }
      EXPECT_FALSE(planned.empty() && !valid.empty());
      SCOPED_TRACE(devices);
    }
  }
}

TEST(Planner, TriesRunAheadFromTheLeastTheLlmNeeds) {
  const RunConfig base = tiny();
  for (const LayoutConfig& l : enumerate_layouts(base, 4, 2)) {
    if (l.placement != Placement::NonColocated) continue;
    const int64_t least = l.llm.pp;
    const int64_t micro_batches = 8 / l.llm.dp;
    EXPECT_GE(l.run_ahead, least) << key(l);
    EXPECT_LE(l.run_ahead, std::max(least, std::min(least + 2, micro_batches))) << key(l);
  }
}

// The tiny model planned on `devices` by the flat profile.
Plan flat_plan(int devices, int top) {
  PlanOptions options;
  options.devices = devices;
  options.top = top;
  return plan_layouts(tiny(), Profile::from_json(flat_profile(1e9, 64), "flat"), options);
}

TEST(Planner, RanksByPredictedThroughputBesideTheBestUniform) {
  const RunConfig base = tiny();
  const Profile profile = Profile::from_json(flat_profile(1e9, 64), "flat");
  const Plan plan = flat_plan(4, 3);
  ASSERT_EQ(plan.top.size(), 3u);
  EXPECT_GT(plan.enumerated, 20);
  EXPECT_EQ(plan.fitting, plan.enumerated);  // the flat profile states no memory: nothing is dropped
  for (size_t i = 1; i < plan.top.size(); ++i) EXPECT_GE(plan.top[i - 1].tokens_per_second, plan.top[i].tokens_per_second);
  ASSERT_TRUE(plan.best_uniform && plan.best_colocated && plan.best_non_colocated);
  EXPECT_DOUBLE_EQ(plan.best_uniform->speedup, 1.0);
  EXPECT_GE(plan.top[0].speedup, 1.0);
  const PlanCandidate& best = plan.top[0];
  EXPECT_NEAR(best.tokens_per_second, 8.0 * 128 / best.step.seconds, 1e-9 * best.tokens_per_second);
  // The critical rank's phases add up to the step.
  EXPECT_NEAR(best.step.phases.total(), best.step.seconds, 1e-9 * best.step.seconds);
  // The LLM-centric baseline is a uniform layout, never better than the best uniform one.
  ASSERT_TRUE(plan.llm_centric);
  EXPECT_EQ(plan.llm_centric->layout.placement, Placement::Uniform);
  EXPECT_GE(plan.llm_centric->step.seconds, plan.best_uniform->step.seconds);
  EXPECT_GE(plan.best_uniform->speedup_over_llm_centric, 1.0);
  // The same candidate predicted on its own gives the same step.
  EXPECT_DOUBLE_EQ(predict_step_seconds(with_layout(base, best.layout), profile), best.step.seconds);
}

// Skipping candidates by their lower bound must not change the answer.
TEST(Planner, PruningByTheLowerBoundFindsWhatSimulatingEveryCandidateFinds) {
  const Profile gpu = Profile::load(source_tree_path("/profiles/h100_dgx.json"));
  const Profile cpu = Profile::from_json(flat_profile(1e9, 2), "flat");
  for (const Profile* profile : {&gpu, &cpu}) {
    for (int devices : {4, 6, 8}) {
      PlanOptions options;
      options.devices = devices;
      options.top = 4;
      const Plan pruned = plan_layouts(tiny(), *profile, options);
      options.exhaustive = true;
      const Plan all = plan_layouts(tiny(), *profile, options);
      ASSERT_EQ(pruned.top.size(), all.top.size());
      for (size_t i = 0; i < all.top.size(); ++i) {
        EXPECT_DOUBLE_EQ(pruned.top[i].step.seconds, all.top[i].step.seconds) << devices << " devices, rank " << i;
      }
      for (auto best : {&Plan::best_uniform, &Plan::best_colocated, &Plan::best_non_colocated}) {
        ASSERT_EQ((pruned.*best).has_value(), (all.*best).has_value());
        if ((all.*best)) EXPECT_EQ(key((pruned.*best)->layout), key((all.*best)->layout)) << devices << " devices";
      }
    }
  }
}

// --search-sequence-parallel: the run file's layouts with and without the
// LLM's sequence parallelism, and the best of both ways found; the sweep it
// writes runs each point as planned, also where base.toml sets it otherwise.
TEST(Planner, SearchesTheLlmsSequenceParallelismBothWays) {
  const RunConfig off = tiny(), on = tiny({"layout.llm.sp=true"});
  const auto keys = [](const std::vector<LayoutConfig>& layouts) {
    std::set<std::string> out;
    for (const LayoutConfig& l : layouts) out.insert(key(l));
    return out;
  };
  const std::vector<LayoutConfig> searched = enumerate_layouts(off, 4, 2, true);
  std::set<std::string> both = keys(enumerate_layouts(off, 4, 2));
  const std::set<std::string> with_sp = keys(enumerate_layouts(on, 4, 2));
  both.insert(with_sp.begin(), with_sp.end());
  EXPECT_EQ(keys(searched), both);
  EXPECT_EQ(searched.size(), both.size()) << "a layout listed twice";
  EXPECT_EQ(keys(enumerate_layouts(on, 4, 2, true)), both) << "the run file's setting changed the search";
  const auto split = std::count_if(searched.begin(), searched.end(), [](const LayoutConfig& l) { return l.llm.sp; });
  EXPECT_GT(split, 0);
  EXPECT_LT(split, static_cast<int64_t>(searched.size()));

  // The GPU profile prices SP's collectives and memory differently from TP's.
  const Profile gpu = Profile::load(source_tree_path("/profiles/h100_dgx.json"));
  PlanOptions options;
  options.devices = 8;
  options.top = 3;
  const Plan plan_off = plan_layouts(off, gpu, options), plan_on = plan_layouts(on, gpu, options);
  options.search_sequence_parallel = true;
  const Plan searched_plan = plan_layouts(on, gpu, options);
  EXPECT_TRUE(searched_plan.searched_sequence_parallel);
  EXPECT_EQ(searched_plan.enumerated, static_cast<int64_t>(keys(enumerate_layouts(on, 8, 2, true)).size()));
  EXPECT_DOUBLE_EQ(searched_plan.top[0].step.seconds,
                   std::min(plan_off.top[0].step.seconds, plan_on.top[0].step.seconds));
  for (auto best : {&Plan::best_uniform, &Plan::best_colocated, &Plan::best_non_colocated}) {
    ASSERT_TRUE((searched_plan.*best) && (plan_off.*best) && (plan_on.*best));
    EXPECT_DOUBLE_EQ((searched_plan.*best)->step.seconds,
                     std::min((plan_off.*best)->step.seconds, (plan_on.*best)->step.seconds));
  }
  // The same layout with and without SP is predicted differently (else the search would be moot here).
  Layout tp2{2, 1, 1, 4};
  LayoutConfig uniform = off.layout;
  uniform.placement = Placement::Uniform;
  uniform.llm = tp2;
  const double whole = predict_step_seconds(with_layout(off, uniform), gpu);
  uniform.llm.sp = true;
  EXPECT_NE(predict_step_seconds(with_layout(off, uniform), gpu), whole);

  // Points with sp = false under a base.toml with sp = true run without it.
  std::vector<PlanCandidate> everything = searched_plan.top;
  for (auto best : {&Plan::best_uniform, &Plan::best_colocated, &Plan::best_non_colocated}) {
    everything.push_back(*(searched_plan.*best));
  }
  Plan mixed = searched_plan;
  mixed.top = everything;
  const bool some_without = std::any_of(everything.begin(), everything.end(),
                                        [](const PlanCandidate& c) { return c.layout.llm.tp > 1 && !c.layout.llm.sp; });
  if (!some_without) {  // one point of TP without SP in any case
    mixed.top.push_back(mixed.top.front());
    mixed.top.back().layout.placement = Placement::Uniform;
    mixed.top.back().layout.llm = tp2;
  }
  const std::string dir = ::testing::TempDir() + "/plan_sp_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/base.toml") << to_toml(on);
  std::ofstream(dir + "/sweep.toml") << plan_sweep_toml(mixed, on, "base.toml");
  size_t point = 0;
  for (const SweepRun& run : expand_sweep(load_sweep_spec(dir + "/sweep.toml"), {})) {
    ASSERT_TRUE(run.config) << run.label << ": " << run.invalid_reason;
    const LayoutConfig& planned = run.is_baseline ? mixed.best_uniform->layout : mixed.top.at(point++).layout;
    EXPECT_EQ(run.config->layout.llm.sp, planned.llm.sp) << run.label;
    EXPECT_EQ(run.config->placement.llm, planned.llm) << run.label;
  }
  EXPECT_EQ(point, mixed.top.size());
  std::filesystem::remove_all(dir);
}

TEST(Planner, DropsWhatDoesNotFitAndSaysWhenNothingDoes) {
  const RunConfig base = tiny();
  nlohmann::json j = flat_profile(1e9, 64);
  j["memory"] = {{"bytes_per_device", 1e12}, {"reserved_bytes", 0}};
  PlanOptions options;
  options.devices = 4;
  const Plan roomy = plan_layouts(base, Profile::from_json(j, "roomy"), options);
  EXPECT_EQ(roomy.fitting, roomy.enumerated);
  // Between the least and the most any candidate needs: some fit, some do not.
  double least = 1e300, most = 0;
  for (const LayoutConfig& l : enumerate_layouts(base, 4, 2)) {
    const double need = fullest_rank(rank_memory(with_layout(base, l), MemoryAssumptions{4, 0})).total();
    least = std::min(least, need);
    most = std::max(most, need);
  }
  j["memory"]["bytes_per_device"] = (least + most) / 2;
  const Plan tight = plan_layouts(base, Profile::from_json(j, "tight"), options);
  EXPECT_GT(tight.fitting, 0);
  EXPECT_LT(tight.fitting, tight.enumerated);
  for (const PlanCandidate& c : tight.top) EXPECT_LE(c.memory_needed, (least + most) / 2);
  j["memory"]["bytes_per_device"] = least / 2;
  try {
    plan_layouts(base, Profile::from_json(j, "small"), options);
    ADD_FAILURE() << "expected no candidate to fit";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fits the profile's memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--recompute-where-needed tries"), std::string::npos) << e.what();
  }
}

// --recompute-where-needed: a layout that does not fit as the run file says
// is tried with recompute, on the fewest of each stage's first layers that
// fit. Every layout that fits without it keeps its setting and step; the
// rest fit only with it, and not with one layer fewer, at a step slower than
// the same layout's without and faster than with every layer recomputed
// where fewer fit; and more layouts fit.
TEST(Planner, RecomputeWhereNeededFitsMoreLayoutsWithTheFewestLayersRecomputed) {
  // Activations weigh more than the state; four layers a module leave room between none and all.
  const RunConfig base = tiny({"llm.seq_len=512", "llm.layers=4", "encoder.layers=4"});
  const auto as_set = [&](const LayoutConfig& l, bool recompute, int64_t layers, const std::string& modules = "both") {
    RunConfig c = with_layout(base, l);
    c.placement = resolve_placement(l.placement, l.encoder, l.llm);
    c.run.recompute = recompute ? "full" : "none";
    c.run.recompute_layers = layers;
    c.run.recompute_modules = recompute ? modules : "both";
    return c;
  };
  const auto need = [&](const LayoutConfig& l, bool recompute, int64_t layers = 0, const std::string& modules = "both") {
    return fullest_rank(rank_memory(as_set(l, recompute, layers, modules), MemoryAssumptions{4, 0})).total();
  };
  std::vector<double> needs;
  for (const LayoutConfig& l : enumerate_layouts(base, 4, 2)) needs.push_back(need(l, false));
  std::sort(needs.begin(), needs.end());
  const double memory = needs[needs.size() / 4];  // a quarter of the layouts fit without recompute
  nlohmann::json j = flat_profile(1e9, 64);
  j["memory"] = {{"bytes_per_device", memory}, {"reserved_bytes", 0}};
  const Profile profile = Profile::from_json(j, "tight");
  PlanOptions options;
  options.devices = 4;
  options.top = 1000;
  options.exhaustive = true;
  const Plan as_given = plan_layouts(base, profile, options);
  options.recompute_where_needed = true;
  const Plan chosen = plan_layouts(base, profile, options);
  EXPECT_GT(chosen.fitting, as_given.fitting);
  ASSERT_EQ(static_cast<int64_t>(chosen.top.size()), chosen.fitting);
  std::map<std::string, double> step_as_given;
  for (const PlanCandidate& c : as_given.top) step_as_given[key(c.layout)] = c.step.seconds;
  int all_layers = 0, some_layers = 0;
  std::map<std::string, int> by_modules;
  for (const PlanCandidate& c : chosen.top) {
    EXPECT_LE(c.memory_needed, memory) << key(c.layout);
    EXPECT_EQ(c.recompute, !step_as_given.count(key(c.layout))) << key(c.layout);
    if (!c.recompute) {
      EXPECT_EQ(c.recompute_layers, 0) << key(c.layout);
      EXPECT_EQ(c.recompute_modules, "both") << key(c.layout);
      EXPECT_EQ(c.step.seconds, step_as_given[key(c.layout)]) << key(c.layout);
      continue;
    }
    EXPECT_GT(need(c.layout, false), memory) << key(c.layout);
    EXPECT_GT(c.step.seconds, predict_step_seconds(as_set(c.layout, false, 0), profile)) << key(c.layout);
    ++by_modules[c.recompute_modules];
    EXPECT_LE(need(c.layout, true, c.recompute_layers, c.recompute_modules), memory) << key(c.layout);
    // Of the module choices that fit, the chosen one's step is bounded lowest.
    const double chosen_bound = step_lower_bound(as_set(c.layout, true, c.recompute_layers, c.recompute_modules),
                                                 estimate_ops(as_set(c.layout, true, c.recompute_layers, c.recompute_modules), profile), profile);
    for (const char* other : {"llm", "encoder", "both"}) {
      for (int64_t layers = 1; layers <= 4; ++layers) {
        const int64_t as_config = layers == 4 ? 0 : layers;
        const RunConfig o = as_set(c.layout, true, as_config, other);
        if (need(c.layout, true, as_config, other) > memory) continue;
        EXPECT_LE(chosen_bound, step_lower_bound(o, estimate_ops(o, profile), profile) * (1 + 1e-12))
            << key(c.layout) << ": " << other << " " << layers;
        break;  // its fewest layers that fit
      }
    }
    if (c.recompute_layers == 0) {
      ++all_layers;
      const Layout encoder = resolve_placement(c.layout.placement, c.layout.encoder, c.layout.llm).encoder;
      const int64_t most = 4 / std::min(c.layout.llm.pp, encoder.pp);  // the most layers in a stage
      if (most > 1) {
        EXPECT_GT(need(c.layout, true, most - 1, c.recompute_modules), memory) << key(c.layout) << ": one layer fewer fits";
      }
      continue;
    }
    ++some_layers;
    EXPECT_LT(c.recompute_layers, 4) << key(c.layout);
    if (c.recompute_layers > 1) {
      EXPECT_GT(need(c.layout, true, c.recompute_layers - 1, c.recompute_modules), memory) << key(c.layout);
    }
    EXPECT_LT(c.step.seconds, predict_step_seconds(as_set(c.layout, true, 0), profile)) << key(c.layout);
  }
  EXPECT_GT(all_layers, 0);
  EXPECT_GT(some_layers, 0);
  for (const auto& [modules, count] : by_modules) std::printf("recompute in %s: %d layouts\n", modules.c_str(), count);
  EXPECT_GT(by_modules.size(), 1u) << "every layout recomputes in the same modules";
  // The sweep runs each point, and the baseline, as planned: recompute where the plan chose it, and only there.
  const std::string dir = ::testing::TempDir() + "/plan_recompute_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/base.toml") << to_toml(base);
  std::ofstream(dir + "/sweep.toml") << plan_sweep_toml(chosen, base, "base.toml");
  size_t point = 0;
  for (const SweepRun& run : expand_sweep(load_sweep_spec(dir + "/sweep.toml"), {})) {
    ASSERT_TRUE(run.config) << run.label << ": " << run.invalid_reason;
    const PlanCandidate& planned = run.is_baseline ? *chosen.best_uniform : chosen.top.at(point++);
    EXPECT_EQ(recomputes_layers(*run.config), planned.recompute) << run.label;
    EXPECT_EQ(run.config->run.recompute_layers, planned.recompute_layers) << run.label;
    EXPECT_EQ(run.config->run.recompute_modules, planned.recompute_modules) << run.label;
  }
  EXPECT_EQ(point, chosen.top.size());
  std::filesystem::remove_all(dir);
}

TEST(Planner, RefusesOptionsOutOfRange) {
  const RunConfig base = tiny();
  const Profile profile = Profile::from_json(flat_profile(1e9, 64), "flat");
  PlanOptions options;
  options.devices = 0;
  EXPECT_THROW(plan_layouts(base, profile, options), std::invalid_argument);
  options.devices = 4;
  options.top = 0;
  EXPECT_THROW(plan_layouts(base, profile, options), std::invalid_argument);
  EXPECT_THROW(parse_plan_objective("throughput"), std::invalid_argument);
}

TEST(Planner, WritesASweepThatMeasuresTheTopAgainstTheBestUniform) {
  const RunConfig base = tiny();
  const Plan plan = flat_plan(4, 4);
  const std::string dir = ::testing::TempDir() + "/plan_sweep_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/base.toml") << to_toml(base);
  std::ofstream(dir + "/sweep.toml") << plan_sweep_toml(plan, base, "base.toml");
  const SweepSpec spec = load_sweep_spec(dir + "/sweep.toml");
  const std::vector<SweepRun> runs = expand_sweep(spec, {});
  int points = 0, baselines = 0;
  for (const SweepRun& run : runs) {
    ASSERT_TRUE(run.config) << run.label << ": " << run.invalid_reason;
    if (run.is_baseline) {
      ++baselines;
      EXPECT_EQ(run.config->layout.placement, Placement::Uniform);
      EXPECT_EQ(run.config->layout.llm, plan.best_uniform->layout.llm);
    } else {
      EXPECT_EQ(key(run.config->layout), key(plan.top[points].layout)) << run.label;
      ++points;
    }
  }
  EXPECT_EQ(points, 4);
  EXPECT_EQ(baselines, 1);  // one baseline shared by every point
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hetpar
