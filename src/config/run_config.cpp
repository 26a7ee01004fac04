#include "config/run_config.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "config/run_schema.hpp"
#include "config/toml_document.hpp"
#include "util/plain_name.hpp"

namespace hetpar {
namespace {

std::string num(int64_t value) { return std::to_string(value); }

// The file to name for a problem involving KEYS: where the first of them that
// was written came from; the run file when all are defaults.
std::string file_of(const TomlDocument& doc, const std::vector<std::string_view>& keys) {
  for (std::string_view key : keys) {
    if (const toml::node* node = doc.find(key)) return doc.origin(node);
  }
  return doc.file();
}

// ---- unknown keys ---------------------------------------------------------------

bool is_key(const std::string& path) {
  const auto& schema = run_schema();
  return std::any_of(schema.begin(), schema.end(),
                     [&](const SchemaKey& s) { return s.key == path; });
}

bool is_section(const std::string& path) {
  const auto& schema = run_schema();
  return std::any_of(schema.begin(), schema.end(),
                     [&](const SchemaKey& s) { return s.key.rfind(path + ".", 0) == 0; });
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substituted = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substituted});
    }
  }
  return row[b.size()];
}

std::string unknown_key_reason(const std::string& path) {
  auto suggest = [](const std::string& key) {
    return "unknown key (did you mean \"" + key + "\"?)";
  };
  // The right name in the wrong section is the likeliest slip.
  const std::string last_part = path.substr(path.rfind('.') + 1);
  for (const SchemaKey& spec : run_schema()) {
    if (spec.name() == last_part) return suggest(spec.key);
  }
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const SchemaKey& spec : run_schema()) {
    for (const std::string& candidate : {spec.key, spec.section()}) {
      const size_t d = edit_distance(path, candidate);
      if (d < best_distance) best = candidate, best_distance = d;
    }
  }
  // Small edits only: a far-off suggestion misleads more than none.
  if (best_distance <= std::max<size_t>(2, best.size() / 4)) return suggest(best);
  return "unknown key (see hetpar train --help for the keys of a run file)";
}

void check_table(const toml::table& table, const std::string& prefix, const TomlDocument& doc) {
  for (auto&& [key, node] : table) {
    const std::string part(key.str());
    // A quoted part holding '.' would alias a real key without being read:
    // show it quoted, so it is unknown and the suggestion shows the fix.
    const bool plain = part.find('.') == std::string::npos;
    const std::string shown = plain ? part : "\"" + part + "\"";
    const std::string path = prefix.empty() ? shown : prefix + "." + shown;
    if (plain && is_key(path)) continue;  // its type is checked when read
    if (!plain || !is_section(path))
      throw ConfigError(doc.origin(&node), path, unknown_key_reason(path));
    if (!node.is_table()) {
      throw ConfigError(doc.origin(&node), path,
                        "is a section: expected a table, got " + describe_node(node));
    }
    check_table(*node.as_table(), path, doc);
  }
}

// ---- consistency across keys ----------------------------------------------------

// KEY's value must be a multiple of a divisor built from other keys. Only
// views and numbers: the planner checks hundreds of thousands of layouts, and
// a rule's text is built only when it fails.
struct MultipleRule {
  std::string_view key;
  int64_t value;
  std::string_view divisor_name;  // "encoder.patch_size", "2 * layout.llm.cp"
  int64_t divisor;
  std::array<std::string_view, 2> divisor_keys;  // for naming the file when KEY was not written
  std::string_view note = {};                     // said after the divisor
  int64_t factors[2] = {0, 0};                    // a divisor that is a product: its factors, shown

  std::string divisor_text() const {  // "data.micro_batch_size * layout.llm.dp = 4 * 2 = 8"
    std::string text(divisor_name);
    if (factors[0] > 0) text += " = " + num(factors[0]) + " * " + num(factors[1]);
    return text + " = " + num(divisor) + std::string(note);
  }
};

MultipleRule multiple_of_key(std::string_view key, int64_t value, std::string_view other, int64_t divisor) {
  return {key, value, other, divisor, {other, {}}};
}

// In the order a reader would fix them: model shapes, then how layouts cut them.
std::vector<MultipleRule> multiple_rules(const RunConfig& c) {
  const Layout& enc = c.placement.encoder;  // resolved: under uniform, the llm's
  const Layout& llm = c.layout.llm;
  const bool uniform = c.layout.placement == Placement::Uniform;
  // Under uniform placement the encoder's tp is the llm's: name the key the user wrote.
  const std::string_view enc_tp_key = uniform ? "layout.llm.tp" : "layout.encoder.tp";
  auto multiple_of_encoder_tp = [&](std::string_view key, int64_t value) {
    MultipleRule rule = multiple_of_key(key, value, enc_tp_key, enc.tp);
    if (uniform) rule.note = " (the encoder's tp under uniform placement)";
    return rule;
  };
  std::vector<MultipleRule> rules = {
      multiple_of_key("encoder.image_size", c.encoder.image_size, "encoder.patch_size",
                      c.encoder.patch_size),
      multiple_of_key("encoder.hidden", c.encoder.hidden, "encoder.heads", c.encoder.heads),
      multiple_of_key("llm.hidden", c.llm.hidden, "llm.heads", c.llm.heads),
      multiple_of_key("llm.heads", c.llm.heads, "llm.kv_heads", c.llm.kv_heads),
      multiple_of_encoder_tp("encoder.heads", c.encoder.heads),
      multiple_of_encoder_tp("encoder.mlp_hidden", c.encoder.mlp_hidden),
      multiple_of_encoder_tp("llm.hidden", c.llm.hidden),  // the projector runs on the encoder's TP group
      multiple_of_key("llm.heads", c.llm.heads, "layout.llm.tp", llm.tp),
      multiple_of_key("llm.kv_heads", c.llm.kv_heads, "layout.llm.tp", llm.tp),
      multiple_of_key("llm.vocab_size", c.llm.vocab_size, "layout.llm.tp", llm.tp),
      multiple_of_key("llm.ffn_hidden", c.llm.ffn_hidden, "layout.llm.tp", llm.tp),
  };
  // Context parallelism gives each cp rank two sequence chunks, one from each
  // end, so causal attention costs every rank the same.
  if (llm.cp > 1) rules.push_back({"llm.seq_len", c.llm.seq_len, "2 * layout.llm.cp", 2 * llm.cp, {"layout.llm.cp", {}}});
  // Sequence parallelism splits each CP rank's part of the sequence over the TP ranks.
  if (c.placement.llm.sp) {
    MultipleRule split{"llm.seq_len", c.llm.seq_len, "layout.llm.cp * layout.llm.tp", int64_t(llm.cp) * llm.tp,
                       {"layout.llm.sp", "layout.llm.tp"}, " (layout.llm.sp)"};
    split.factors[0] = llm.cp;
    split.factors[1] = llm.tp;
    rules.push_back(split);
  }
  // Saturating: absurd sizes must fail the check, not wrap around.
  const int64_t micro = c.data.micro_batch_size;
  const int64_t per_step = micro > std::numeric_limits<int64_t>::max() / llm.dp
                               ? std::numeric_limits<int64_t>::max()
                               : micro * llm.dp;
  MultipleRule batch{"data.global_batch_size", c.data.global_batch_size, "data.micro_batch_size * layout.llm.dp",
                     per_step, {"data.micro_batch_size", "layout.llm.dp"}};
  batch.factors[0] = micro;
  batch.factors[1] = llm.dp;
  rules.push_back(batch);
  return rules;
}

// Each stage needs a layer; 1F1B needs a micro-batch in flight per stage;
// non-colocated, the encoder must run ahead as far as stage 0's warm-up
// (it takes pp micro-batches' rows before it gives back any gradient).
std::optional<ConfigProblem> pipeline_problem(const RunConfig& c) {
  if (c.encoder.layers < c.placement.encoder.pp) {
    return ConfigProblem{{"encoder.layers", "layout.encoder.pp"}, "must be >= layout.encoder.pp = " + num(c.placement.encoder.pp) + " (a layer per stage), got " +
                          num(c.encoder.layers)};
  }
  const int pp = c.placement.llm.pp;
  if (pp == 1) return std::nullopt;
  if (c.llm.layers < pp) {
    return ConfigProblem{{"llm.layers", "layout.llm.pp"}, "must be >= layout.llm.pp = " + num(pp) + " (a layer per stage), got " + num(c.llm.layers)};
  }
  const int64_t micro_batches = micro_batches_per_step(c);
  if (micro_batches < pp) {
    return ConfigProblem{{"data.global_batch_size", "data.micro_batch_size", "layout.llm.dp", "layout.llm.pp"}, "gives " + num(micro_batches) + " micro-batches a step per llm dp rank, fewer than the " +
                          num(pp) + " pipeline stages (layout.llm.pp) that 1F1B keeps busy"};
  }
  if (c.placement.placement == Placement::NonColocated && c.layout.run_ahead < pp) {
    return ConfigProblem{{"layout.run_ahead", "layout.llm.pp"}, "must be >= layout.llm.pp = " + num(pp) + " (the LLM's first stage takes " + num(pp) +
                          " micro-batches' rows before it returns a gradient), got " + num(c.layout.run_ahead)};
  }
  if (c.placement.placement != Placement::Colocated) return std::nullopt;
  // Colocated, every rank encodes a share of every micro-batch at a point of
  // its own stage's order: a collective of the encoder across two stages
  // would pair calls made at different points, so its TP groups stay inside one.
  const int per_stage = c.placement.world_size / pp;
  if (per_stage % c.placement.encoder.tp != 0) {
    return ConfigProblem{{"layout.encoder.tp", "layout.llm.pp"}, "must divide the " + num(per_stage) + " ranks of each llm pipeline stage (colocated, an "
                      "encoder tp group stays inside one stage), got " + num(c.placement.encoder.tp)};
  }
  if (c.layout.encoder_in_flight != 0 && c.layout.encoder_in_flight < pp) {
    return ConfigProblem{{"layout.encoder_in_flight", "layout.llm.pp"}, "must be 0 (llm pp + 1) or >= layout.llm.pp = " + num(pp) + " (the LLM's first stage takes " +
                          num(pp) + " micro-batches' rows before it returns a gradient), got " +
                          num(c.layout.encoder_in_flight)};
  }
  return std::nullopt;
}

}  // namespace

std::optional<ConfigProblem> consistency_problem(const RunConfig& c) {
  if (c.data.images_max < c.data.images_min) {
    return ConfigProblem{{"data.images_max", "data.images_min"}, "must be >= data.images_min = " + num(c.data.images_min) + ", got " +
                          num(c.data.images_max)};
  }
  // Each sample holds a BOS token, its image tokens and at least one text token.
  // (Compared without forming the product, which a huge images_max would overflow.)
  const int64_t per_image = c.encoder.tokens_per_image();
  if (c.llm.seq_len < 2 || (per_image > 0 && c.data.images_max > (c.llm.seq_len - 2) / per_image)) {
    const __int128 needed = static_cast<__int128>(c.data.images_max) * per_image + 2;  // exact
    return ConfigProblem{{"llm.seq_len", "data.images_max"}, fmt::format("must be >= data.images_max * tokens per image + 2 = {}, got {}", needed, c.llm.seq_len)};
  }
  if (c.run.recompute_layers > 0 && !recomputes_layers(c)) {
    return ConfigProblem{{"run.recompute_layers", "run.recompute"}, "caps the layers that recompute, so it needs run.recompute = \"full\", got \"" +
                          c.run.recompute + "\""};
  }
  if (c.run.eval_every > c.run.steps) {
    return ConfigProblem{{"run.eval_every", "run.steps"}, "must be <= run.steps = " + num(c.run.steps) +
                          " (no step would be evaluated), got " + num(c.run.eval_every)};
  }
  if (c.run.eval_every > 0 && !c.data.files.empty() && c.data.eval_files.empty()) {
    return ConfigProblem{{"data.eval_files", "run.eval_every", "data.files"},
                         "must name held-out batch files when run.eval_every > 0 and the run trains on data.files "
                         "(the synthetic held-out samples say nothing about your data)"};
  }
  if (!c.data.eval_files.empty() && c.run.eval_every == 0) {
    return ConfigProblem{{"data.eval_files", "run.eval_every"}, "is read only with run.eval_every > 0, which is 0"};
  }
  if (c.run.recompute_modules != "both" && !recomputes_layers(c)) {
    return ConfigProblem{{"run.recompute_modules", "run.recompute"}, "chooses the modules that recompute, so it needs "
                          "run.recompute = \"full\", got \"" + c.run.recompute + "\""};
  }
  if (!c.run.fp32_residual && c.run.precision == "fp32") {
    return ConfigProblem{{"run.fp32_residual", "run.precision"}, "false keeps the residual stream in bf16, which needs "
                         "run.precision = \"bf16\" (or \"auto\" on a GPU), got \"fp32\""};
  }
  if (c.optim.min_lr > c.optim.lr) {
    return ConfigProblem{{"optim.min_lr", "optim.lr"}, "must be <= optim.lr, got " + std::to_string(c.optim.min_lr)};
  }
  for (const MultipleRule& rule : multiple_rules(c)) {
    if (rule.value % rule.divisor != 0) {
      std::vector<std::string> keys{std::string(rule.key)};
      for (std::string_view k : rule.divisor_keys) {
        if (!k.empty()) keys.emplace_back(k);
      }
      return ConfigProblem{keys, "must be a multiple of " + rule.divisor_text() + ", got " + num(rule.value)};
    }
  }
  if (auto problem = pipeline_problem(c)) return problem;
  if (c.llm.image_token_id >= c.llm.vocab_size) {
    return ConfigProblem{{"llm.image_token_id", "llm.vocab_size"}, "must be below llm.vocab_size = " + num(c.llm.vocab_size) + ", got " +
                          num(c.llm.image_token_id)};
  }
  if (c.encoder.drop_first_token && c.encoder.patches_per_image() < 2) {
    return ConfigProblem{{"encoder.drop_first_token", "encoder.image_size", "encoder.patch_size"}, "an image of one patch has no token left once its first is dropped"};
  }
  // RoPE rotates pairs of channels: the LLM's head size must be even.
  if ((c.llm.hidden / c.llm.heads) % 2 != 0) {
    return ConfigProblem{{"llm.hidden", "llm.heads"}, "llm.hidden / llm.heads = " + num(c.llm.hidden / c.llm.heads) +
                          " is the head size, which RoPE needs even; got llm.hidden = " + num(c.llm.hidden) +
                          ", llm.heads = " + num(c.llm.heads)};
  }
  return std::nullopt;
}

namespace {

// Throws the first problem of `c` naming the file that set its first key.
void check_consistency(const TomlDocument& doc, const RunConfig& c) {
  if (const auto problem = consistency_problem(c)) {
    const std::vector<std::string_view> keys(problem->keys.begin(), problem->keys.end());
    throw ConfigError(file_of(doc, keys), problem->keys.front(), problem->reason);
  }
}

std::string placement_text(const ModulePlacement& p) {
  return to_string(p.placement) + " placement: encoder " + p.encoder.to_string() + " on ranks [" +
         num(p.encoder_ranks.offset) + ", " + num(p.encoder_ranks.end()) + "), llm " +
         p.llm.to_string() + " on ranks [" + num(p.llm_ranks.offset) + ", " +
         num(p.llm_ranks.end()) + ")";
}

// "\n[layout.llm]\n" when SPEC is the first key of its section, else "".
std::string header_if_new_section(const SchemaKey& spec, std::string& current_section) {
  if (spec.section() == current_section) return "";
  current_section = spec.section();
  return "\n[" + current_section + "]\n";
}

constexpr size_t kHelpWidth = 100;

// WORDS starting at COLUMN, wrapped at kHelpWidth; later lines start at INDENT.
std::string wrapped(const std::string& words, size_t column, size_t indent) {
  std::string out;
  size_t at = column;
  std::istringstream in(words);
  for (std::string word; in >> word;) {
    if (!out.empty() && at + 1 + word.size() > kHelpWidth) {
      out += "\n" + std::string(indent, ' ');
      at = indent;
    } else if (!out.empty()) {
      out += ' ';
      ++at;
    }
    out += word;
    at += word.size();
  }
  return out;
}

}  // namespace

namespace {

RunConfig config_of(TomlDocument doc, const std::vector<std::string>& overrides) {
  const std::string file = doc.file();
  for (const std::string& assignment : overrides) doc.apply_override(assignment);
  check_table(doc.root(), "", doc);  // unknown keys first: a typo explains later errors

  RunConfig config;
  config.source_file = file;
  read_schema_values(doc, config);
  if (config.run.name.empty()) {
    config.run.name = std::filesystem::path(file).stem().string();
    if (const std::string why = plain_name_problem(config.run.name); !why.empty()) {
      throw ConfigError(file, "run.name", "taken from the file name, " + why + "; set run.name");
    }
  }

  try {
    config.placement =
        resolve_placement(config.layout.placement, config.layout.encoder, config.layout.llm);
  } catch (const PlacementError& e) {
    throw ConfigError(file_of(doc, {"layout.placement", "layout.encoder", "layout.llm"}), "layout",
                      e.what());
  }
  check_consistency(doc, config);
  return config;
}

}  // namespace

RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides) {
  return config_of(TomlDocument::load(file), overrides);
}

RunConfig load_run_config_over(const std::string& base_toml, const std::string& origin, const std::string& file,
                               const std::vector<std::string>& overrides) {
  TomlDocument base = TomlDocument::from_text(base_toml, origin);
  if (file.empty()) return config_of(std::move(base), overrides);
  TomlDocument doc = TomlDocument::load(file);
  doc.place_over(std::move(base));
  return config_of(std::move(doc), overrides);
}

std::optional<ConfigProblem> trainer_support_problem(const RunConfig& c) {
  const bool uniform = c.placement.placement == Placement::Uniform;
  if (c.placement.encoder.pp > 1 && c.placement.placement != Placement::NonColocated) {
    return ConfigProblem{{"layout.encoder.pp"},
                         "encoder pipeline parallelism needs the non-colocated placement (the encoder on ranks of "
                         "its own), got " + c.placement.encoder.to_string() + " under " + to_string(c.placement.placement)};
  }
  // Under uniform placement the encoder takes the LLM's layout and runs whole on every CP rank.
  if (!uniform && c.placement.encoder.cp > 1) {
    return ConfigProblem{{"layout.encoder.cp"},
                         "the encoder takes no context parallelism (an image's tokens are few; split images over "
                         "layout.encoder.dp instead), got " + c.placement.encoder.to_string()};
  }
  return std::nullopt;
}

void check_trainer_supports(const RunConfig& c) {
  if (const auto problem = trainer_support_problem(c)) {
    throw ConfigError(c.source_file, problem->keys.front(), problem->reason);
  }
}

std::optional<ConfigProblem> layout_problem(RunConfig& c) {
  try {
    c.placement = resolve_placement(c.layout.placement, c.layout.encoder, c.layout.llm);
  } catch (const PlacementError& e) {
    return ConfigProblem{{"layout"}, e.what()};
  }
  if (auto problem = consistency_problem(c)) return problem;
  return trainer_support_problem(c);
}

void check_world_size(const RunConfig& config, int launched_world_size) {
  if (launched_world_size != config.placement.world_size) {
    throw ConfigError(config.source_file, "layout",
                      "needs " + num(config.placement.world_size) + " ranks (" +
                          placement_text(config.placement) + ") but " + num(launched_world_size) +
                          " were launched");
  }
}

std::string describe_run_file() {
  size_t setting_width = 0;
  for (const SchemaKey& spec : run_schema()) {
    setting_width = std::max(setting_width, spec.name().size() + 3 + spec.default_text.size());
  }
  const size_t column = 2 + setting_width + 2;
  std::string text =
      "A run file is TOML. Every key is optional; a missing key takes the default shown as\n"
      "`key = default`, followed by the key's type, allowed values and meaning.\n";
  std::string section;
  for (const SchemaKey& spec : run_schema()) {
    text += header_if_new_section(spec, section);
    std::string setting = spec.name() + " = " + spec.default_text;
    setting.resize(setting_width, ' ');
    const std::string type =
        kind_name(spec.kind) + (spec.allowed.text.empty() ? "" : " " + spec.allowed.text);
    text += "  " + setting + "  " + wrapped(type + ": " + spec.meaning, column, column) + "\n";
  }
  text +=
      "\ninclude = [\"base.toml\", ...]  (top level) merges those files first, paths relative to\n"
      "  the including file; included files may include others. Tables merge key by key;\n"
      "  the including file wins, and a later include wins over an earlier one.\n"
      "--set dotted.key=value  (repeatable) applies after all files, e.g. --set layout.llm.tp=2.\n"
      "  The value is TOML (2, true, 1.5, \"s\", [1, 2]); a bare word that is not a TOML\n"
      "  value is taken as a string: --set layout.placement=colocated.\n"
      "Besides each key's own range, the file must be consistent: heads divide hidden sizes,\n"
      "tp divides heads, kv_heads, vocab and hidden sizes, 2 * cp divides llm.seq_len,\n"
      "micro_batch_size * llm dp divides global_batch_size, and the layouts fit the placement.\n"
      "With layout.llm.pp > 1 (1F1B): llm.layers >= pp, at least pp micro-batches a step per\n"
      "  llm dp rank, and non-colocated layout.run_ahead >= pp. Under uniform placement the\n"
      "  encoder then runs on the first stage's ranks with the LLM's tp (a pipelined\n"
      "  homogeneous trainer's layout). Colocated, the encoder spans every rank and each rank\n"
      "  places its share of the encoder's work by layout.encoder_schedule; encoder tp must\n"
      "  divide the ranks of a stage.\n"
      "With layout.encoder.pp > 1 (non-colocated only): encoder.layers >= encoder pp; the\n"
      "  encoder's stages run 1F1B among themselves, the last layout.run_ahead micro-batches\n"
      "  ahead of the LLM.\n";
  return text;
}

std::string to_toml(const RunConfig& config) {
  std::string text = "# resolved run config; " + placement_text(config.placement) +
                     "; world size " + num(config.placement.world_size) + "\n";
  std::string section;
  for (const SchemaKey& spec : run_schema()) {
    text += header_if_new_section(spec, section);
    text += spec.name() + " = " + toml_literal(spec.get(config)) + "\n";
  }
  return text;
}

}  // namespace hetpar
