#include "plan/plan_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "metrics/model_flops.hpp"

namespace hetpar {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string placement_name(Placement p) { return to_string(p); }

// { tp = 1, cp = 1, pp = 1, dp = 4 }
std::string layout_toml(const Layout& l) {
  return fmt::format("{{ tp = {}, cp = {}, pp = {}, dp = {} }}", l.tp, l.cp, l.pp, l.dp);
}

// The LLM's, which states its sequence parallelism either way: a sweep point's
// table merges into base.toml's, whose setting would otherwise stand.
std::string llm_layout_toml(const Layout& l) {
  return fmt::format("{{ tp = {}, cp = {}, pp = {}, dp = {}, sp = {} }}", l.tp, l.cp, l.pp, l.dp, l.sp);
}

nlohmann::json layout_json(const Layout& l) {
  return {{"tp", l.tp}, {"cp", l.cp}, {"pp", l.pp}, {"dp", l.dp}, {"sp", l.sp}};
}

// The encoder's layout as the trainer resolves it (uniform: the LLM's, without PP).
Layout encoder_layout(const LayoutConfig& l) { return resolve_placement(l.placement, l.encoder, l.llm).encoder; }

nlohmann::json phases_json(const StepPhases& p) {
  return {{"encoder_forward", p.encoder_forward},
          {"encoder_backward", p.encoder_backward},
          {"llm_forward", p.llm_forward},
          {"llm_backward", p.llm_backward},
          {"boundary", p.boundary},
          {"pipeline_wait", p.pipeline_wait},
          {"gradient_sync_and_optimizer", p.gradient_sync_and_optimizer},
          {"core_wait", p.core_wait}};
}

nlohmann::json candidate_json(const PlanCandidate& c) {
  const bool apart = c.layout.placement == Placement::NonColocated;
  const Layout enc = encoder_layout(c.layout);
  nlohmann::json j = {{"placement", placement_name(c.layout.placement)},
                      {"encoder", layout_json(enc)},
                      {"llm", layout_json(c.layout.llm)},
                      {"encoder_devices", apart ? enc.size() : c.layout.llm.size()},
                      {"llm_devices", c.layout.llm.size()},
                      {"run_ahead", apart ? nlohmann::json(c.layout.run_ahead) : nlohmann::json(nullptr)},
                      {"recompute", c.recompute},
                      {"recompute_layers", c.recompute ? nlohmann::json(c.recompute_layers) : nlohmann::json(nullptr)},
                      {"recompute_modules", c.recompute ? nlohmann::json(c.recompute_modules) : nlohmann::json(nullptr)},
                      {"step_seconds", c.step.seconds},
                      {"tokens_per_second", c.tokens_per_second},
                      {"tflops_per_device", c.tflops_per_device},
                      {"peak_memory_bytes", c.fullest.total()},
                      {"memory_needed_bytes", c.memory_needed},
                      {"fullest_rank", c.fullest.what},
                      {"fullest_rank_bytes", {{"state", c.fullest.state},
                                              {"activations", c.fullest.activations},
                                              {"transient", c.fullest.transient},
                                              {"unmade_gradients", c.fullest.unmade_gradients},
                                              {"reserved", c.fullest.reserved}}},
                      {"critical_rank", c.step.critical},
                      {"phases", phases_json(c.step.phases)}};
  // At a fixed device count and batch both objectives rank alike: one speedup serves both.
  j["speedup_tokens"] = c.speedup > 0 ? nlohmann::json(c.speedup) : nlohmann::json(nullptr);
  j["speedup_tflops"] = j["speedup_tokens"];
  j["speedup_over_llm_centric"] =
      c.speedup_over_llm_centric > 0 ? nlohmann::json(c.speedup_over_llm_centric) : nlohmann::json(nullptr);
  return j;
}

std::string phases_text(const StepPhases& p) {
  std::string text;
  const double shown = 1e-6 * p.total();  // rounding residue of the simulation is not a phase
  const std::pair<const char*, double> parts[] = {
      {"enc fwd", p.encoder_forward}, {"enc bwd", p.encoder_backward}, {"llm fwd", p.llm_forward},
      {"llm bwd", p.llm_backward},    {"boundary", p.boundary},        {"wait", p.pipeline_wait},
      {"sync+opt", p.gradient_sync_and_optimizer}, {"core wait", p.core_wait}};
  for (const auto& [name, seconds] : parts) {
    if (seconds > shown) text += fmt::format("{}{} {:.3g} s", text.empty() ? "" : ", ", name, seconds);
  }
  return text;
}

// " +recompute" (every layer of both modules), " +recompute 3/stage" (each
// stage's first three), " +recompute llm 3/stage" (the LLM's alone), or "".
std::string recompute_text(const PlanCandidate& c) {
  if (!c.recompute) return "";
  const std::string modules = c.recompute_modules == "both" ? "" : " " + c.recompute_modules;
  return c.recompute_layers == 0 ? " +recompute" + modules
                                 : fmt::format(" +recompute{} {}/stage", modules, c.recompute_layers);
}

std::string ratio(double r) { return r > 0 ? fmt::format("{:.3f}x", r) : "-"; }

std::string layout_column(const PlanCandidate& c) { return layout_text(c.layout) + recompute_text(c); }

// One candidate's row, its layout in a column `width` wide.
std::string row(const std::string& rank, const PlanCandidate& c, size_t width) {
  return fmt::format("{:<6} {:<14} {:<{}} {:>9.4g} {:>11.4g} {:>8.1f} {:>9.2f} {:>8} {:>8}\n", rank,
                     placement_name(c.layout.placement), layout_column(c), width, c.step.seconds, c.tokens_per_second,
                     c.tflops_per_device, c.fullest.total() / kGiB, ratio(c.speedup),
                     ratio(c.speedup_over_llm_centric));
}

}  // namespace

std::string layout_text(const LayoutConfig& l) {
  std::string text = "enc " + encoder_layout(l).to_string() + " / llm " + l.llm.to_string();
  if (l.placement == Placement::NonColocated) {
    text += fmt::format(" ({}+{} dev, ahead {})", l.encoder.size(), l.llm.size(), l.run_ahead);
  }
  return text;
}

std::string plan_table(const Plan& plan, const std::string& profile_origin) {
  std::string text = fmt::format(
      "{} valid layouts on {} devices{}, {} fit the memory of {}; searched in {:.2f} s; ranked by {}\n\n",
      plan.enumerated, plan.devices,
      plan.searched_sequence_parallel ? " (the LLM with and without sequence parallelism)" : "", plan.fitting,
      profile_origin, plan.search_seconds, plan.objective == PlanObjective::kTokens ? "tokens/s" : "TFLOPS/device");
  // The layout column as wide as its widest entry.
  size_t width = 52;
  for (const PlanCandidate& c : plan.top) width = std::max(width, layout_column(c).size());
  for (const auto* c : {&plan.best_uniform, &plan.best_colocated, &plan.best_non_colocated, &plan.llm_centric, &plan.given}) {
    if (*c) width = std::max(width, layout_column(**c).size());
  }
  text += fmt::format("{:<6} {:<14} {:<{}} {:>9} {:>11} {:>8} {:>9} {:>8} {:>8}\n", "rank", "placement", "layout", width,
                      "step s", "tokens/s", "TFLOPS", "peak GiB", "vs best", "vs LLM-c");
  for (size_t i = 0; i < plan.top.size(); ++i) text += row(std::to_string(i + 1), plan.top[i], width);
  text += "\nbest of each placement (vs best: over the best uniform layout; vs LLM-c: over the LLM-centric one,\n"
          "the uniform layout best for the LLM alone, which the encoder inherits):\n";
  const std::pair<const char*, const std::optional<PlanCandidate>*> bests[] = {
      {"uniform", &plan.best_uniform},
      {"colocated", &plan.best_colocated},
      {"non-colocated", &plan.best_non_colocated}};
  for (const auto& [name, best] : bests) {
    text += *best ? row("best", **best, width) : fmt::format("{:<6} {:<14} no valid layout fits\n", "best", name);
  }
  if (plan.llm_centric) text += row("LLM-c", *plan.llm_centric, width);
  if (plan.given) text += "\nthe run file's own layout:\n" + row("given", *plan.given, width);
  text += "\nwhere each step goes (the critical rank: the one that waits least):\n";
  for (size_t i = 0; i < plan.top.size(); ++i) {
    const PlanCandidate& c = plan.top[i];
    text += fmt::format("{:>3}. {}: {}\n", i + 1, c.step.critical, phases_text(c.step.phases));
  }
  if (plan.best_uniform) {
    text += fmt::format("  baseline: {}: {}\n", plan.best_uniform->step.critical,
                        phases_text(plan.best_uniform->step.phases));
  }
  return text;
}

nlohmann::json plan_json(const Plan& plan, const RunConfig& base, const std::string& profile_origin,
                         const std::map<std::string, std::string>& labels) {
  const auto best = [](const std::optional<PlanCandidate>& c) {
    return c ? candidate_json(*c) : nlohmann::json(nullptr);
  };
  nlohmann::json j = {
      {"format", "hetpar-plan/1"},
      {"name", base.run.name},
      {"llm", ""},
      {"encoder", ""},
      {"encoder_parameters", encoder_parameters(base.encoder) + projector_parameters(base.encoder, base.llm)},
      {"llm_parameters", llm_parameters(base.llm)},
      {"devices", plan.devices},
      {"profile", profile_origin},
      {"objective", plan.objective == PlanObjective::kTokens ? "tokens" : "tflops"},
      {"searched_sequence_parallel", plan.searched_sequence_parallel},
      {"candidates",
       {{"enumerated", plan.enumerated}, {"fitting", plan.fitting}, {"search_seconds", plan.search_seconds}}},
      {"best", {{"uniform", best(plan.best_uniform)}, {"colocated", best(plan.best_colocated)},
                {"non-colocated", best(plan.best_non_colocated)}}},
      {"given", best(plan.given)},
      {"llm_centric_uniform", best(plan.llm_centric)},
      {"top", nlohmann::json::array()}};
  for (const PlanCandidate& c : plan.top) j["top"].push_back(candidate_json(c));
  for (const auto& [key, value] : labels) j[key] = value;
  return j;
}

bool same_recompute(const PlanCandidate& c, const RunConfig& base) {
  return c.recompute == recomputes_layers(base) && c.recompute_layers == base.run.recompute_layers &&
         c.recompute_modules == base.run.recompute_modules;
}

// ", run = { recompute = \"full\", recompute_layers = N, recompute_modules = \"llm\" }"
// where a candidate's setting is not base.toml's (or `always`), else "".
std::string recompute_set(const PlanCandidate& c, const RunConfig& base, bool always = false) {
  if (!always && same_recompute(c, base)) return "";
  return fmt::format(", run = {{ recompute = \"{}\", recompute_layers = {}, recompute_modules = \"{}\" }}",
                     c.recompute ? "full" : "none", c.recompute_layers, c.recompute ? c.recompute_modules : "both");
}

std::string plan_sweep_toml(const Plan& plan, const RunConfig& base, const std::string& base_file) {
  const Layout baseline_llm = plan.best_uniform ? plan.best_uniform->layout.llm : base.layout.llm;
  // A point's set applies to its baseline run too: where any point sets recompute, the baseline states its own.
  const bool any_set = std::any_of(plan.top.begin(), plan.top.end(),
                                   [&](const PlanCandidate& c) { return !same_recompute(c, base); });
  PlanCandidate as_base;  // the run file's own setting, where no uniform layout fits
  as_base.recompute = recomputes_layers(base);
  as_base.recompute_layers = base.run.recompute_layers;
  as_base.recompute_modules = base.run.recompute_modules;
  const std::string baseline_run = recompute_set(plan.best_uniform ? *plan.best_uniform : as_base, base, any_set);
  std::string text = fmt::format(
      "# Written by hetpar plan: the {} best predicted layouts of {} on {} devices, and the best uniform\n"
      "# one as the baseline. Measure them with: hetpar sweep <this file>\n"
      "[sweep]\nname = \"plan-{}-{}\"\nbase = \"{}\"\nloss_rtol = {}\n"
      "baseline = {{ layout = {{ placement = \"uniform\", encoder = {}, llm = {} }}{} }}\n\n"
      "[[axis]]\nname = \"layout\"\n",
      plan.top.size(), base.run.name, plan.devices, base.run.name, plan.devices, base_file,
      computes_in_bf16(base) ? "1e-2" : "1e-5", layout_toml(Layout{}), llm_layout_toml(baseline_llm), baseline_run);
  for (size_t i = 0; i < plan.top.size(); ++i) {
    const PlanCandidate& c = plan.top[i];
    const LayoutConfig& l = c.layout;
    const bool uniform = l.placement == Placement::Uniform;
    text += fmt::format("\n# predicted {:.4g} s a step, {:.4g} tokens/s{}\n[[axis.value]]\nname = \"top{}-{}\"\n",
                        c.step.seconds, c.tokens_per_second,
                        c.speedup > 0 ? fmt::format(", {:.3f}x the best uniform", c.speedup) : "", i + 1,
                        placement_name(l.placement));
    text += fmt::format("set = {{ layout = {{ placement = \"{}\", encoder = {}, llm = {}, run_ahead = {} }}{} }}\n",
                        placement_name(l.placement), layout_toml(uniform ? Layout{} : l.encoder),
                        llm_layout_toml(l.llm), l.run_ahead, recompute_set(c, base));
  }
  return text;
}

}  // namespace hetpar
