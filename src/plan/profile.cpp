#include "plan/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <limits>
#include <stdexcept>

namespace hetpar {
namespace {

double log_distance(double a, double b) { return std::abs(std::log(a / b)); }

// The entry of `entries` nearest by `distance`, or an error naming what has none.
template <typename T, typename Distance>
const T& nearest(const std::vector<T>& entries, Distance distance, const std::string& what) {
  const T* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const T& e : entries) {
    const double d = distance(e);
    if (d < best_distance) {
      best_distance = d;
      best = &e;
    }
  }
  if (best == nullptr) throw std::runtime_error("profile: no measurement of " + what);
  return *best;
}

double number_at_least(const nlohmann::json& entry, const char* key, const std::string& where, bool zero_allowed) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_number() || !(it->get<double>() > 0 || (zero_allowed && it->get<double>() == 0))) {
    throw std::runtime_error(where + ": \"" + key + "\" must be a " + (zero_allowed ? "non-negative" : "positive") +
                             " number");
  }
  return it->get<double>();
}
double positive(const nlohmann::json& entry, const char* key, const std::string& where) {
  return number_at_least(entry, key, where, false);
}
// A time that can measure as 0 (a backward faster than the timer's noise).
double non_negative(const nlohmann::json& entry, const char* key, const std::string& where) {
  return number_at_least(entry, key, where, true);
}

// Rates and times within what any device measures, so that a figure in the
// wrong unit (or an edited one) is named here rather than priced: a rate of
// 1e-300 FLOP/s made an infinite op cost, which the pipeline replay took for
// an op not yet placed.
constexpr double kLeastRate = 1e3;        // FLOP/s or bytes/s
constexpr double kMostSeconds = 3600;     // one op or message
double rate(const nlohmann::json& entry, const char* key, const std::string& where) {
  const double r = positive(entry, key, where);
  if (r < kLeastRate) throw std::runtime_error(fmt::format("{}: \"{}\" must be at least 1000 a second, got {:g}", where, key, r));
  return r;
}
double seconds(const nlohmann::json& entry, const char* key, const std::string& where, bool zero_allowed) {
  const double s = number_at_least(entry, key, where, zero_allowed);
  if (s > kMostSeconds) throw std::runtime_error(fmt::format("{}: \"{}\" must be at most 3600 seconds, got {:g}", where, key, s));
  return s;
}

// A count: a whole number from `least` to a million.
int whole_number(double value, int least, const char* key, const std::string& where) {
  if (!(value >= least && value <= 1e6 && value == std::floor(value))) {
    throw std::runtime_error(fmt::format("{}: \"{}\" must be a whole number from {} to 1000000, got {:g}", where, key,
                                         least, value));
  }
  return static_cast<int>(value);
}

// An optional field of one JSON type: `fallback` when absent, an error naming it when of another type.
template <typename T>
T optional_field(const nlohmann::json& entry, const std::string& key, T fallback, const std::string& where) {
  const auto it = entry.find(key);
  if (it == entry.end()) return fallback;
  const bool fits = std::is_same_v<T, bool>             ? it->is_boolean()
                    : std::is_same_v<T, std::string>    ? it->is_string()
                    : std::is_same_v<T, nlohmann::json> ? it->is_object() || it->is_array()
                                                        : it->is_number();
  if (!fits) {
    const char* wanted = std::is_same_v<T, bool>             ? "true or false"
                         : std::is_same_v<T, std::string>    ? "a string"
                         : std::is_same_v<T, nlohmann::json> ? "an object or array"
                                                             : "a number";
    throw std::runtime_error(where + ": \"" + key + "\" must be " + wanted + ", got " + it->dump());
  }
  return it->template get<T>();
}

const nlohmann::json& section(const nlohmann::json& profile, const char* name, const std::string& origin) {
  const auto it = profile.find(name);
  if (it == profile.end() || !it->is_array() || it->empty()) {
    throw std::runtime_error(origin + ": no \"" + name + "\" measurements (write the profile with hetpar calibrate)");
  }
  return *it;
}

}  // namespace

Profile Profile::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || !j.contains("format") || j["format"] != "hetpar-profile/1") {
    throw std::runtime_error(origin + ": not a hetpar profile (format \"hetpar-profile/1\")");
  }
  Profile p;
  p.measured_ = optional_field(j, "measured", nlohmann::json::object(), origin);
  if (!p.measured_.is_object()) throw std::runtime_error(origin + ": \"measured\" must be an object");
  // 0 (not stated) counts as one core, as before.
  p.cores_ = std::max(1, whole_number(optional_field(p.measured_, "cores", 1.0, origin + ": measured"), 0, "cores",
                                      origin + ": measured"));
  const auto optional_number = [&](const char* key, double fallback) {
    return j.contains(key) ? non_negative(j, key, origin) : fallback;
  };
  p.element_bytes_ = optional_number("element_bytes", 4);
  if (p.element_bytes_ != 2 && p.element_bytes_ != 4) {
    throw std::runtime_error(origin + ": \"element_bytes\" must be 2 (bf16) or 4 (fp32)");
  }
  p.peak_flops_ = j.contains("peak_flops_per_second") ? rate(j, "peak_flops_per_second", origin) : 0;
  p.gpus_per_node_ = whole_number(optional_number("gpus_per_node", 0), 0, "gpus_per_node", origin);
  if (p.gpus_per_node_ > 0) p.cores_ = 0;  // a device per rank: no cores shared
  const auto optional_flag = [&](const char* key) {
    const auto it = j.find(key);
    if (it == j.end()) return false;
    if (!it->is_boolean()) throw std::runtime_error(origin + ": \"" + key + "\" must be true or false");
    return it->get<bool>();
  };
  p.attention_keeps_probabilities_ = optional_flag("attention_keeps_probabilities");
  p.norm_backward_unfused_ = optional_flag("norm_backward_unfused");
  p.reduce_scatter_copies_input_ = optional_flag("reduce_scatter_copies_input");
  p.gemm_adds_into_fp32_ = optional_flag("gemm_adds_into_fp32");
  if (const auto shared = j.find("shared_cores"); shared != j.end()) {
    const double e = positive(*shared, "efficiency", origin + ": shared_cores");
    if (e > 1) throw std::runtime_error(origin + ": shared_cores: \"efficiency\" must be at most 1");
    p.shared_core_efficiency_ = e;
  }
  if (const auto memory = j.find("memory"); memory != j.end()) {
    const std::string where = origin + ": memory";
    if (!memory->is_object()) throw std::runtime_error(where + " must be an object");
    p.memory_bytes_ = positive(*memory, "bytes_per_device", where);
    p.reserved_bytes_ = memory->contains("reserved_bytes") ? non_negative(*memory, "reserved_bytes", where) : 0;
    p.memory_shared_ = optional_field(*memory, "shared_by_all_ranks", false, where);
  }
  for (const auto& e : section(j, "gemm", origin)) {
    const std::string where = origin + ": gemm entry";
    const double forward = rate(e, "flops_per_second", where);
    // Profiles from published figures state one rate: the backward's GEMMs then run at it too.
    const double backward = e.contains("backward_flops_per_second") ? rate(e, "backward_flops_per_second", where)
                                                                   : forward;
    p.gemm_.push_back({std::log(positive(e, "m", where)), std::log(positive(e, "n", where)),
                       std::log(positive(e, "k", where)), forward, backward});
  }
  for (const auto& e : section(j, "attention", origin)) {
    const std::string where = origin + ": attention entry";
    const double heads = positive(e, "heads", where);
    p.attention_.push_back({positive(e, "batch", where) * heads, positive(e, "seq", where),
                            positive(e, "head_dim", where), optional_field(e, "causal", false, where),
                            optional_field(e, "kv_heads", heads, where) != heads,
                            seconds(e, "forward_seconds", where, false), seconds(e, "backward_seconds", where, true)});
  }
  for (const auto& e : section(j, "memory_bound", origin)) {
    const std::string where = origin + ": memory_bound entry";
    p.memory_.push_back({optional_field<std::string>(e, "op", "", where), positive(e, "bytes", where),
                         rate(e, "bytes_per_second", where)});
  }
  const nlohmann::json layers = optional_field(j, "layers", nlohmann::json::array(), origin);  // published profiles have none
  if (!layers.is_array()) throw std::runtime_error(origin + ": \"layers\" must be an array");
  for (const auto& e : layers) {
    const std::string where = origin + ": layers entry";
    const std::string module = optional_field<std::string>(e, "module", "", where);
    if (module != "llm" && module != "encoder") {
      throw std::runtime_error(where + ": \"module\" must be \"llm\" or \"encoder\", got \"" + module + "\"");
    }
    p.layers_.push_back({module, positive(e, "sequences", where), positive(e, "seq", where), positive(e, "hidden", where),
                         positive(e, "heads", where), positive(e, "kv_heads", where), positive(e, "mlp", where),
                         seconds(e, "forward_seconds", where, false), seconds(e, "backward_seconds", where, false)});
  }
  for (const auto& e : section(j, "collectives", origin)) {
    const std::string where = origin + ": collective entry";
    Collective c{optional_field<std::string>(e, "op", "", where), optional_field<std::string>(e, "scope", "", where),
                 static_cast<int>(optional_field(e, "group_size", 0.0, where)), 0, 0, {}, 0, 0};
    if (c.group_size < 2) throw std::runtime_error(where + " (" + c.op + "): \"group_size\" must be 2 or more");
    if (c.scope != "" && c.scope != "intra_node" && c.scope != "inter_node") {
      throw std::runtime_error(where + " (" + c.op + "): \"scope\" must be \"intra_node\" or \"inter_node\", got \"" +
                               c.scope + "\"");
    }
    // The trainer's collectives sit between compute: the in-context
    // measurement where the profile has one, else the back-to-back one.
    const std::string prefix = e.contains("in_context_points") ? "in_context_" : "";
    if (e.contains(prefix + "bytes_per_second")) {
      c.latency = seconds(e, (prefix + "latency_seconds").c_str(), where, true);
      c.bytes_per_second = rate(e, (prefix + "bytes_per_second").c_str(), where);
    }
    const nlohmann::json points = optional_field(e, prefix + "points", nlohmann::json::array(), where);
    if (!points.is_array()) throw std::runtime_error(where + ": \"" + prefix + "points\" must be an array");
    for (const auto& point : points) {
      c.points.emplace_back(positive(point, "bytes", where + " point"), seconds(point, "seconds", where + " point", true));
    }
    if (e.contains("skew_per_compute_second")) {
      c.skew_per_compute_second = non_negative(e, "skew_per_compute_second", where);
      c.in_context_compute_seconds = non_negative(e, "in_context_compute_seconds", where);
    }
    if (c.bytes_per_second == 0 && c.points.empty()) {
      throw std::runtime_error(where + " (" + c.op + "): neither a fit nor measured points");
    }
    p.collectives_.push_back(std::move(c));
  }
  return p;
}

Profile Profile::load(const std::string& path) {
  if (std::filesystem::is_directory(path)) throw std::runtime_error(path + ": a directory, not a profile file");
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the profile (write one with hetpar calibrate --out " + path + ")");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  return from_json(j, path);
}

const Profile::Gemm& Profile::nearest_gemm(double m, double n, double k) const {
  const auto key = std::make_tuple(m, n, k);
  auto it = gemm_nearest_.find(key);
  if (it == gemm_nearest_.end()) {
    const double lm = std::log(m), ln = std::log(n), lk = std::log(k);
    const Gemm& g = nearest(
        gemm_,
        [&](const Gemm& e) { return std::abs(lm - e.log_m) + std::abs(ln - e.log_n) + std::abs(lk - e.log_k); },
        "gemm");
    it = gemm_nearest_.emplace(key, static_cast<size_t>(&g - gemm_.data())).first;
  }
  return gemm_[it->second];
}

double Profile::gemm_seconds(double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return 2 * m * n * k / nearest_gemm(m, n, k).flops_per_second;
}

double Profile::gemm_backward_seconds(double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return 4 * m * n * k / nearest_gemm(m, n, k).backward_flops_per_second;
}

double Profile::attention_seconds(double batch_heads, double seq, double head_dim, bool causal, bool backward,
                                  bool grouped) const {
  if (batch_heads <= 0 || seq <= 0) return 0;
  const auto key = std::make_tuple(batch_heads, seq, head_dim, causal, backward, grouped);
  if (const auto it = attention_seconds_.find(key); it != attention_seconds_.end()) return it->second;
  const Attention& a = nearest(
      attention_,
      [&](const Attention& e) {
        return log_distance(seq, e.seq) + log_distance(head_dim, e.head_dim) + (e.causal == causal ? 0 : 100) +
               (e.grouped == grouped ? 0 : 50);
      },
      "attention");
  const double scale = batch_heads / a.batch_heads * (seq / a.seq) * (seq / a.seq) * (head_dim / a.head_dim);
  return attention_seconds_[key] = (backward ? a.backward : a.forward) * scale;
}

double Profile::memory_seconds(const std::string& op, double bytes) const {
  if (bytes <= 0) return 0;
  const MemoryBound& m = nearest(
      memory_, [&](const MemoryBound& e) { return log_distance(bytes, e.bytes) + (e.op == op ? 0 : 100); }, op);
  if (m.op != op) throw std::runtime_error("profile: no measurement of " + op);
  return bytes / m.bytes_per_second;
}

double Profile::collective_seconds(const std::string& op, int group_size, double bytes, int members_per_node) const {
  if (group_size <= 1 || bytes <= 0) return 0;
  const auto key = std::make_tuple(op, group_size, bytes, members_per_node);
  if (const auto it = collective_seconds_.find(key); it != collective_seconds_.end()) return it->second;
  const bool spans = members_per_node > 0 && members_per_node < group_size;
  const auto seconds_in = [&](const std::string& scope) {
    const Collective& c = nearest(
        collectives_,
        [&](const Collective& e) {
          const double other_scope = e.scope.empty() || e.scope == scope ? 0 : 50;  // used only where none matches
          return (e.op == op ? 0 : 100) + other_scope +
                 log_distance(static_cast<double>(group_size), static_cast<double>(std::max(e.group_size, 1)));
        },
        op);
    if (c.op != op) throw std::runtime_error("profile: no measurement of " + op);
    const double links = scope == "inter_node" && c.scope == "inter_node" ? members_per_node : 1;
    if (c.bytes_per_second > 0) return c.latency + bytes / (c.bytes_per_second * links);
    const auto& [at, measured] =
        nearest(c.points, [&](const std::pair<double, double>& pt) { return log_distance(bytes, pt.first); }, op);
    return measured * std::max(1.0, bytes / at);
  };
  const double inside = seconds_in("intra_node");
  return collective_seconds_[key] = spans ? std::max(inside, seconds_in("inter_node")) : inside;
}

double Profile::collective_skew_seconds(int group_size, double compute_seconds) const {
  const auto has_rate = [](const Collective& c) { return c.op == "all_reduce" && c.skew_per_compute_second > 0; };
  if (group_size <= 1 || std::none_of(collectives_.begin(), collectives_.end(), has_rate)) return 0;
  const Collective& c = nearest(
      collectives_,
      [&](const Collective& e) {
        return has_rate(e) ? log_distance(static_cast<double>(group_size), static_cast<double>(std::max(e.group_size, 1)))
                           : std::numeric_limits<double>::infinity();
      },
      "all_reduce drift");
  return c.skew_per_compute_second * (compute_seconds - c.in_context_compute_seconds);
}

}  // namespace hetpar
