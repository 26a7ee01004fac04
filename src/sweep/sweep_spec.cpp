#include "sweep/sweep_spec.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "config/toml_document.hpp"
#include "util/plain_name.hpp"

namespace hetpar {
namespace {

// A TOML value as override text ("128", "2.5e-05", "true", "\"colocated\"").
std::string literal(const toml::node& node, const std::string& file, const std::string& key) {
  if (const auto* v = node.as_string()) return toml_quoted(v->get());
  if (const auto* v = node.as_integer()) return std::to_string(v->get());
  if (const auto* v = node.as_boolean()) return v->get() ? "true" : "false";
  if (const auto* v = node.as_floating_point()) {
    char buffer[64];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, v->get()).ptr;
    std::string text(buffer, end);
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // stays a float
    return text;
  }
  throw ConfigError(file, key, "must be a string, number or boolean, got " + describe_node(node));
}

// { encoder = { hidden = 128 } } -> "encoder.hidden=128"
void flatten(const toml::table& table, const std::string& prefix, const std::string& file,
             std::vector<std::string>& out) {
  for (const auto& [k, node] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = node.as_table()) {
      flatten(*sub, key, file, out);
    } else {
      out.push_back(key + "=" + literal(node, file, key));
    }
  }
}

const toml::table& table_at(const toml::node* node, const std::string& file, const std::string& key) {
  if (!node || !node->is_table()) throw ConfigError(file, key, "must be a table" + std::string(node ? ", got " + describe_node(*node) : ""));
  return *node->as_table();
}

std::string string_at(const toml::table& table, const char* name, const std::string& file, const std::string& key) {
  const toml::node* node = table.get(name);
  if (!node || !node->is_string() || node->as_string()->get().empty()) {
    throw ConfigError(file, key + "." + name, "must be a non-empty string");
  }
  return node->as_string()->get();
}

// Refuses a key of `table` other than `known` (a typo must not be ignored).
void check_known_keys(const toml::table& table, const std::vector<std::string>& known, const std::string& file,
                      const std::string& where) {
  for (const auto& [k, node] : table) {
    if (std::find(known.begin(), known.end(), k.str()) != known.end()) continue;
    std::string list;
    for (const std::string& key : known) list += (list.empty() ? "" : ", ") + key;
    const std::string key = where.empty() ? std::string(k.str()) : where + "." + std::string(k.str());
    throw ConfigError(file, key, "unknown key (known: " + list + ")");
  }
}

// "p001" for the first point, "b001" for the first baseline.
std::string numbered_id(char kind, size_t number) {
  char id[24];
  std::snprintf(id, sizeof id, "%c%03zu", kind, number);
  return id;
}

// The axis values of grid point `index` (the last axis moves fastest).
std::vector<const SweepAxisValue*> point_values(const SweepSpec& spec, size_t index) {
  std::vector<const SweepAxisValue*> values(spec.axes.size());
  for (size_t a = spec.axes.size(); a-- > 0;) {
    values[a] = &spec.axes[a].values[index % spec.axes[a].values.size()];
    index /= spec.axes[a].values.size();
  }
  return values;
}

size_t grid_size(const SweepSpec& spec) {
  size_t total = 1;
  for (const SweepAxis& axis : spec.axes) total *= axis.values.size();
  return total;
}

std::string label_of(const std::vector<const SweepAxisValue*>& values) {
  std::string label;
  for (const SweepAxisValue* v : values) label += (label.empty() ? "" : " / ") + v->name;
  return label;
}

// A short stable hash (FNV-1a, 64 bits) of the resolved config: the resume key.
std::string hash_text(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

// Validates one run; fills config, world size and hash, or the reason it is invalid.
void resolve(SweepRun& run, const std::string& base) {
  try {
    RunConfig config = load_run_config(base, run.overrides);
    check_trainer_supports(config);
    run.world_size = world_size_of(config);
    // Only the non-colocated schedule reads run_ahead: elsewhere it must not
    // make two equal baselines look different.
    if (config.placement.placement != Placement::NonColocated) config.layout.run_ahead = LayoutConfig{}.run_ahead;
    if (config.placement.placement != Placement::Colocated || config.placement.llm.pp == 1) {  // likewise
      config.layout.encoder_schedule = LayoutConfig{}.encoder_schedule;
      config.layout.encoder_in_flight = LayoutConfig{}.encoder_in_flight;
    }
    config.run.name = run.id;
    run.config_hash = hash_text(to_toml(config));
    run.config = std::move(config);
  } catch (const std::exception& e) {
    run.invalid_reason = e.what();
  }
}

}  // namespace

int world_size_of(const RunConfig& c) { return c.placement.world_size; }

SweepSpec load_sweep_spec(const std::string& file) {
  toml::table root;
  try {
    root = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    throw ConfigError(file, "(syntax)", std::string(e.description()));
  } catch (const std::exception& e) {
    throw ConfigError(file, "(file)", e.what());
  }
  SweepSpec spec;
  spec.file = file;
  check_known_keys(root, {"sweep", "axis"}, file, "");
  const toml::table& sweep = table_at(root.get("sweep"), file, "sweep");
  spec.name = string_at(sweep, "name", file, "sweep");
  // The name becomes results/sweeps/<name>, which --fresh empties: one plain component.
  if (const std::string why = plain_name_problem(spec.name); !why.empty()) throw ConfigError(file, "sweep.name", why);
  const std::string base = string_at(sweep, "base", file, "sweep");
  spec.base = (std::filesystem::path(file).parent_path() / base).lexically_normal().string();
  if (!std::filesystem::exists(spec.base)) throw ConfigError(file, "sweep.base", "no such run file: " + spec.base);
  if (const toml::node* rtol = sweep.get("loss_rtol")) {
    const auto value = rtol->value<double>();
    // inf would pass every point (and TOML spells it): a finite number.
    if (!value || !std::isfinite(*value) || *value < 0) {
      throw ConfigError(file, "sweep.loss_rtol", "must be a finite number >= 0");
    }
    spec.loss_rtol = *value;
  }
  if (const toml::node* baseline = sweep.get("baseline")) {
    flatten(table_at(baseline, file, "sweep.baseline"), "", file, spec.baseline);
  }
  check_known_keys(sweep, {"name", "base", "loss_rtol", "baseline"}, file, "sweep");
  const toml::array* axes = root.get_as<toml::array>("axis");
  if (!axes || axes->empty()) throw ConfigError(file, "axis", "needs at least one [[axis]]");
  for (const toml::node& axis_node : *axes) {
    const std::string where = "axis[" + std::to_string(spec.axes.size()) + "]";
    const toml::table& axis_table = table_at(&axis_node, file, where);
    check_known_keys(axis_table, {"name", "value"}, file, where);
    SweepAxis axis{string_at(axis_table, "name", file, where), {}};
    // A record keeps one value an axis name (its "axes" object): two axes of one name would lose one.
    for (size_t a = 0; a < spec.axes.size(); ++a) {
      if (spec.axes[a].name == axis.name) {
        throw ConfigError(file, where + ".name",
                          "\"" + axis.name + "\" is already the name of axis[" + std::to_string(a) + "]");
      }
    }
    const toml::array* values = axis_table.get_as<toml::array>("value");
    if (!values || values->empty()) throw ConfigError(file, where + ".value", "needs at least one [[axis.value]]");
    std::set<std::string> names;
    for (const toml::node& value_node : *values) {
      const std::string vwhere = axis.name + ".value[" + std::to_string(axis.values.size()) + "]";
      const toml::table& value_table = table_at(&value_node, file, vwhere);
      check_known_keys(value_table, {"name", "set"}, file, vwhere);
      SweepAxisValue value{string_at(value_table, "name", file, vwhere), {}};
      // Value names make the labels results are matched and pooled by: two
      // points with one label would be taken for repeats of one point.
      if (!names.insert(value.name).second) {
        throw ConfigError(file, vwhere + ".name", "\"" + value.name + "\" is already a value of axis " + axis.name);
      }
      flatten(table_at(value_table.get("set"), file, vwhere + ".set"), "", file, value.overrides);
      axis.values.push_back(std::move(value));
    }
    spec.axes.push_back(std::move(axis));
  }
  // Distinct values can still join into one label ("p / q" + "r" and "p" + "q / r").
  std::map<std::string, size_t> point_of_label;
  for (size_t index = 0, total = grid_size(spec); index < total; ++index) {
    const std::string label = label_of(point_values(spec, index));
    const auto [it, is_new] = point_of_label.try_emplace(label, index);
    if (!is_new) {
      throw ConfigError(file, "axis",
                        "points " + numbered_id('p', it->second + 1) + " and " + numbered_id('p', index + 1) +
                            " share the label \"" + label + "\": rename a value");
    }
  }
  return spec;
}

std::vector<SweepRun> expand_sweep(const SweepSpec& spec, const std::vector<std::string>& extra) {
  std::vector<SweepRun> runs;
  std::map<std::string, std::string> baseline_by_hash;  // one run per distinct baseline config
  for (size_t index = 0, total = grid_size(spec); index < total; ++index) {
    SweepRun point;
    point.id = numbered_id('p', index + 1);
    const std::vector<const SweepAxisValue*> values = point_values(spec, index);
    point.label = label_of(values);
    for (size_t a = 0; a < spec.axes.size(); ++a) {
      point.axes.emplace_back(spec.axes[a].name, values[a]->name);
      point.overrides.insert(point.overrides.end(), values[a]->overrides.begin(), values[a]->overrides.end());
    }
    SweepRun baseline = point;
    baseline.is_baseline = true;
    baseline.overrides.insert(baseline.overrides.end(), spec.baseline.begin(), spec.baseline.end());
    point.overrides.insert(point.overrides.end(), extra.begin(), extra.end());
    baseline.overrides.insert(baseline.overrides.end(), extra.begin(), extra.end());
    resolve(point, spec.base);
    baseline.id = "baseline";  // the name inside the config must not differ between points sharing it
    resolve(baseline, spec.base);
    if (baseline.config && point.config) {
      auto [it, is_new] = baseline_by_hash.try_emplace(baseline.config_hash, "");
      if (is_new) {
        it->second = numbered_id('b', baseline_by_hash.size());
        baseline.id = it->second;
        baseline.config->run.name = it->second;
        baseline.label = "baseline of " + point.label;
        runs.push_back(std::move(baseline));
      }
      point.baseline_id = it->second;
    } else if (point.config) {
      point.baseline_id.clear();
      point.invalid_reason = "its baseline is invalid: " + baseline.invalid_reason;
      point.config.reset();
    }
    runs.push_back(std::move(point));
  }
  return runs;
}

std::vector<SweepRun> repeat_runs(const std::vector<SweepRun>& runs, int repeats) {
  if (repeats < 1) throw std::invalid_argument("--repeat must be at least 1, got " + std::to_string(repeats));
  std::vector<SweepRun> out = runs;
  for (int k = 2; k <= repeats; ++k) {
    const std::string suffix = "r" + std::to_string(k);
    for (const SweepRun& run : runs) {
      if (!run.config) continue;  // as invalid in every round: listed once
      SweepRun again = run;
      again.id += suffix;
      again.config->run.name = again.id;
      again.repeat = k;
      if (!again.baseline_id.empty()) again.baseline_id += suffix;
      out.push_back(std::move(again));
    }
  }
  return out;
}

}  // namespace hetpar
