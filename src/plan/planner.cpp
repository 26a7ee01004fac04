#include "plan/planner.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "metrics/model_flops.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "plan/op_times.hpp"

namespace hetpar {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Which of a layout's settings of sequence parallelism are tried where tp > 1.
enum class SequenceParallel { kOff, kOn, kBoth };

// Every (tp, cp, pp, dp) of `size` ranks, by tp, then cp, then pp; where tp >
// 1, with sequence parallelism as `sp` says (without it first).
std::vector<Layout> layouts_of(int size, bool cp_allowed, bool pp_allowed,
                               SequenceParallel sp = SequenceParallel::kOff) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= size; ++tp) {
    if (size % tp != 0) continue;
    for (int cp = 1; cp <= size / tp; ++cp) {
      if ((size / tp) % cp != 0 || (cp > 1 && !cp_allowed)) continue;
      for (int pp = 1; pp <= size / tp / cp; ++pp) {
        if ((size / tp / cp) % pp != 0 || (pp > 1 && !pp_allowed)) continue;
        const Layout layout{tp, cp, pp, size / tp / cp / pp};
        if (tp == 1 || sp != SequenceParallel::kOn) out.push_back(layout);
        if (tp > 1 && sp != SequenceParallel::kOff) out.push_back({layout.tp, layout.cp, layout.pp, layout.dp, true});
      }
    }
  }
  return out;
}

// Keeps `layout` when its config is valid; `scratch` is then that config,
// placement resolved.
struct Collector {
  RunConfig scratch;
  std::vector<LayoutConfig> kept;
  bool valid(const LayoutConfig& layout) {
    scratch.layout = layout;
    return !layout_problem(scratch);
  }
  bool offer(const LayoutConfig& layout) {
    if (!valid(layout)) return false;
    kept.push_back(layout);
    return true;
  }
};

double objective_of(const PlanCandidate& c, PlanObjective o) {
  return o == PlanObjective::kTokens ? c.tokens_per_second : c.tflops_per_device;
}

// Of the uniform layouts that fit, the one whose step is shortest for the LLM
// alone (no images, so no encoder work); none when no uniform layout fits.
std::optional<PlanCandidate> llm_centric_baseline(const RunConfig& base, const Profile& profile,
                                                  const std::vector<LayoutConfig>& layouts,
                                                  const std::vector<size_t>& uniform) {
  RunConfig text_only = base;
  text_only.data.images_min = text_only.data.images_max = 0;
  text_only.data.files_images_per_sample.reset();
  text_only.data.files_most_images.reset();
  std::optional<PlanCandidate> best;
  double best_seconds = 0;
  for (size_t i : uniform) {
    text_only.layout = layouts[i];
    text_only.placement = resolve_placement(layouts[i].placement, layouts[i].encoder, layouts[i].llm);
    const double seconds = predict_step(text_only, profile).seconds;
    if (!best || seconds < best_seconds) {
      best.emplace();
      best->layout = layouts[i];
      best_seconds = seconds;
    }
  }
  return best;
}

}  // namespace

PlanObjective parse_plan_objective(const std::string& name) {
  if (name == "tokens") return PlanObjective::kTokens;
  if (name == "tflops") return PlanObjective::kTflops;
  throw std::invalid_argument("unknown objective \"" + name + "\" (choose tokens or tflops)");
}

RunConfig with_layout(const RunConfig& base, const LayoutConfig& layout) {
  RunConfig c = base;
  c.layout = layout;
  if (const auto problem = layout_problem(c)) {
    throw std::invalid_argument("layout: " + problem->keys.front() + " " + problem->reason);
  }
  return c;
}

std::vector<LayoutConfig> enumerate_layouts(const RunConfig& base, int devices, int extra_run_ahead,
                                            bool search_sequence_parallel) {
  if (devices < 1) throw std::invalid_argument("--devices must be at least 1, got " + std::to_string(devices));
  Collector collect{base, {}};
  LayoutConfig layout = base.layout;
  // Uniform: the encoder takes the LLM's layout.
  layout.placement = Placement::Uniform;
  layout.encoder = Layout{};
  // The LLM's sequence parallelism: the run file's (layout.llm.sp), or both ways.
  const SequenceParallel sp = search_sequence_parallel ? SequenceParallel::kBoth
                              : base.layout.llm.sp     ? SequenceParallel::kOn
                                                       : SequenceParallel::kOff;
  const std::vector<Layout> llm_all = layouts_of(devices, true, true, sp);
  for (const Layout& llm : llm_all) {
    layout.llm = llm;
    collect.offer(layout);
  }
  // Colocated: the encoder on the same devices, with its own TP and DP.
  layout.placement = Placement::Colocated;
  for (const Layout& encoder : layouts_of(devices, false, false)) {
    for (const Layout& llm : llm_all) {
      layout.encoder = encoder;
      layout.llm = llm;
      collect.offer(layout);
    }
  }
  // Non-colocated: every split, the encoder's devices first. No rule ties
  // one side's layout to the other's here, so each side's layouts are
  // screened on their own first (against a one-rank other side), and only
  // pairs of survivors are checked whole: the pairs that fail are most of
  // the product, and checking them all took minutes on 4096 devices.
  layout.placement = Placement::NonColocated;
  const auto survivors = [&](int size, bool encoder_side) {
    std::vector<Layout> kept;
    LayoutConfig alone = layout;
    for (const Layout& l : layouts_of(size, !encoder_side, true, encoder_side ? SequenceParallel::kOff : sp)) {
      (encoder_side ? alone.encoder : alone.llm) = l;
      (encoder_side ? alone.llm : alone.encoder) = Layout{};
      alone.run_ahead = std::max(1, alone.llm.pp);
      if (collect.valid(alone)) kept.push_back(l);
    }
    return kept;
  };
  for (int encoder_devices = 1; encoder_devices < devices; ++encoder_devices) {
    const std::vector<Layout> llms = survivors(devices - encoder_devices, false);
    if (llms.empty()) continue;
    for (const Layout& encoder : survivors(encoder_devices, true)) {
      for (const Layout& llm : llms) {
        layout.encoder = encoder;
        layout.llm = llm;
        // The least run-ahead (the LLM's pp) is the only one a rule bounds:
        // what fails there fails at any.
        const int64_t least = std::max(1, llm.pp);
        layout.run_ahead = least;
        if (!collect.offer(layout)) continue;
        // Beyond the step's micro-batches a run-ahead runs as that many would.
        const int64_t micro_batches = micro_batches_per_step(collect.scratch);
        for (int64_t ahead = least + 1; ahead <= least + extra_run_ahead && ahead <= micro_batches; ++ahead) {
          layout.run_ahead = ahead;
          collect.offer(layout);
        }
      }
    }
  }
  return collect.kept;
}

namespace {

// The most transformer layers any pipeline stage of either module holds.
int64_t most_layers_in_a_stage(const RunConfig& c) {
  int64_t most = 0;
  for (int s = 0; s < c.placement.llm.pp; ++s) most = std::max(most, stage_layers(c.llm.layers, c.placement.llm.pp, s).count);
  for (int s = 0; s < c.placement.encoder.pp; ++s) {
    most = std::max(most, stage_layers(c.encoder.layers, c.placement.encoder.pp, s).count);
  }
  return most;
}

}  // namespace

int64_t fewest_recomputed_layers_that_fit(const RunConfig& c, const std::function<bool(int64_t)>& fits_with) {
  // Each layer recomputed frees memory and adds work: the fewest that fit are the fastest that fit.
  const int64_t all = most_layers_in_a_stage(c);
  if (all <= 1 || !fits_with(0)) return 0;
  int64_t fewest = 1, most = all;  // `most` fits (as many as a stage holds: all)
  while (fewest < most) {
    const int64_t middle = fewest + (most - fewest) / 2;
    if (fits_with(middle)) {
      most = middle;
    } else {
      fewest = middle + 1;
    }
  }
  return fewest == all ? 0 : fewest;
}

Plan plan_layouts(const RunConfig& base, const Profile& profile, const PlanOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  if (options.top < 1) throw std::invalid_argument("--top must be at least 1, got " + std::to_string(options.top));
  const std::vector<LayoutConfig> layouts =
      enumerate_layouts(base, options.devices, options.extra_run_ahead, options.search_sequence_parallel);
  if (layouts.empty()) {
    // Unreachable from a valid run file on 2 or more devices (an encoder of
    // dp N - 1 beside a one-rank LLM is always valid); kept for the message.
    throw std::invalid_argument("no layout of this model is valid on " + std::to_string(options.devices) + " devices");
  }
  Plan plan;
  plan.devices = options.devices;
  plan.objective = options.objective;
  plan.searched_sequence_parallel = options.search_sequence_parallel;
  plan.enumerated = static_cast<int64_t>(layouts.size());
  const double tokens_per_step = double(base.data.global_batch_size) * double(base.llm.seq_len);
  RunConfig c = base;
  const auto fits = [&](const PlanCandidate& candidate) {
    return profile.memory_bytes() <= 0 || candidate.memory_needed <= profile.memory_bytes();
  };
  // `c` with `layout` in place (valid: enumerate_layouts checked it), and its
  // memory; with recompute where the options allow it and the layout needs it.
  const auto place = [&](const LayoutConfig& layout, PlanCandidate& candidate) {
    c.layout = layout;
    c.placement = resolve_placement(layout.placement, layout.encoder, layout.llm);
    candidate.layout = layout;
    const auto measure = [&] {
      const std::vector<RankMemory> ranks = rank_memory(c, memory_assumptions(profile));
      candidate.fullest = fullest_rank(ranks);
      candidate.memory_needed = profile.memory_shared_by_all_ranks() ? all_ranks_bytes(ranks) : candidate.fullest.total();
    };
    c.run.recompute = base.run.recompute;
    c.run.recompute_layers = base.run.recompute_layers;
    c.run.recompute_modules = base.run.recompute_modules;
    measure();
    if (options.recompute_where_needed && !fits(candidate) && !recomputes_layers(c)) {
      c.run.recompute = "full";
      // Each module choice with its fewest layers that fit; the fitting one
      // with the least step bound wins (both, with every layer, where none fits).
      std::optional<std::pair<double, int64_t>> best;  // (bound, layers)
      std::string best_modules = "both";
      for (const char* modules : {"llm", "encoder", "both"}) {
        c.run.recompute_modules = modules;
        c.run.recompute_layers = fewest_recomputed_layers_that_fit(c, [&](int64_t layers) {
          c.run.recompute_layers = layers;
          measure();
          return fits(candidate);
        });
        measure();
        if (!fits(candidate)) continue;
        const double bound = step_lower_bound(c, estimate_ops(c, profile), profile);
        if (!best || bound < best->first) {
          best = {bound, c.run.recompute_layers};
          best_modules = modules;
        }
      }
      c.run.recompute_modules = best_modules;
      c.run.recompute_layers = best ? best->second : 0;
      measure();
    }
    candidate.recompute = recomputes_layers(c);
    candidate.recompute_layers = c.run.recompute_layers;
    candidate.recompute_modules = c.run.recompute_modules;
  };
  const auto predict = [&](PlanCandidate& candidate, const OpEstimate& ops) {
    candidate.step = predict_step(c, ops, profile);
    candidate.tokens_per_second = tokens_per_step / candidate.step.seconds;
    candidate.tflops_per_device =
        step_flops(c, static_cast<int64_t>(expected_images_per_step(c) + 0.5)).total() / candidate.step.seconds /
        options.devices / 1e12;
  };
  // Every candidate that fits, with a lower bound of its step (no simulation yet).
  struct Bounded {
    size_t layout;
    double bound;
  };
  std::vector<Bounded> fitting;
  double least_memory = -1;
  for (size_t i = 0; i < layouts.size(); ++i) {
    PlanCandidate candidate;
    place(layouts[i], candidate);
    if (least_memory < 0 || candidate.memory_needed < least_memory) least_memory = candidate.memory_needed;
    if (!fits(candidate)) continue;
    fitting.push_back({i, step_lower_bound(c, estimate_ops(c, profile), profile)});
  }
  plan.fitting = static_cast<int64_t>(fitting.size());
  std::vector<size_t> fitting_uniform;
  for (const Bounded& f : fitting) {
    if (layouts[f.layout].placement == Placement::Uniform) fitting_uniform.push_back(f.layout);
  }
  if (fitting.empty()) {
    throw std::invalid_argument(fmt::format(
        "none of the {} valid layouts on {} devices fits the profile's memory ({:.3g} GiB{}); the least any needs is "
        "{:.3g} GiB{}",
        plan.enumerated, options.devices, profile.memory_bytes() / kGiB,
        profile.memory_shared_by_all_ranks() ? " shared by all ranks" : " a device", least_memory / kGiB,
        options.recompute_where_needed || recomputes_layers(base)
            ? ""
            : " (--recompute-where-needed tries each with activation recompute)"));
  }
  // Simulated in the order of their bounds: one whose bound is no better than
  // the K-th best step and its placement's best can join neither, and is skipped.
  // Both objectives rank by step time: the devices and the work of a step are the same for every candidate.
  std::stable_sort(fitting.begin(), fitting.end(), [](const Bounded& a, const Bounded& b) { return a.bound < b.bound; });
  const size_t top = static_cast<size_t>(options.top);
  for (const Bounded& f : fitting) {
    const LayoutConfig& layout = layouts[f.layout];
    std::optional<PlanCandidate>& best = layout.placement == Placement::Uniform     ? plan.best_uniform
                                         : layout.placement == Placement::Colocated ? plan.best_colocated
                                                                                    : plan.best_non_colocated;
    const bool may_top = plan.top.size() < top || f.bound < plan.top.back().step.seconds;
    const bool may_best = !best || f.bound < best->step.seconds;
    if (!options.exhaustive && !may_top && !may_best) continue;
    // Its memory and op times again: kept for every candidate they would
    // cost far more than recomputing them for the few simulated.
    PlanCandidate candidate;
    place(layout, candidate);
    predict(candidate, estimate_ops(c, profile));
    // Equal steps keep the order they were simulated in.
    const auto later = [&](const PlanCandidate& other) { return candidate.step.seconds < other.step.seconds; };
    if (!best || later(*best)) best = candidate;
    const auto at = std::find_if(plan.top.begin(), plan.top.end(), later);
    if (static_cast<size_t>(at - plan.top.begin()) < top) {
      plan.top.insert(at, candidate);
      if (plan.top.size() > top) plan.top.pop_back();
    }
  }
  if (base.placement.world_size == options.devices) {
    plan.given.emplace();
    place(base.layout, *plan.given);
    predict(*plan.given, estimate_ops(c, profile));
  }
  plan.llm_centric = llm_centric_baseline(base, profile, layouts, fitting_uniform);
  if (plan.llm_centric) {
    place(plan.llm_centric->layout, *plan.llm_centric);
    predict(*plan.llm_centric, estimate_ops(c, profile));
  }
  const double baseline = plan.best_uniform ? objective_of(*plan.best_uniform, options.objective) : 0;
  const double centric = plan.llm_centric ? objective_of(*plan.llm_centric, options.objective) : 0;
  const auto set_speedups = [&](PlanCandidate& p) {
    if (baseline > 0) p.speedup = objective_of(p, options.objective) / baseline;
    if (centric > 0) p.speedup_over_llm_centric = objective_of(p, options.objective) / centric;
  };
  for (auto* best :
       {&plan.best_uniform, &plan.best_colocated, &plan.best_non_colocated, &plan.given, &plan.llm_centric}) {
    if (*best) set_speedups(**best);
  }
  for (PlanCandidate& t : plan.top) set_speedups(t);
  plan.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return plan;
}

}  // namespace hetpar
