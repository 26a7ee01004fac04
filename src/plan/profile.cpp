#include "plan/profile.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
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

const nlohmann::json& section(const nlohmann::json& profile, const char* name, const std::string& origin) {
  const auto it = profile.find(name);
  if (it == profile.end() || !it->is_array() || it->empty()) {
    throw std::runtime_error(origin + ": no \"" + name + "\" measurements (write the profile with hetpar calibrate)");
  }
  return *it;
}

}  // namespace

Profile Profile::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || j.value("format", "") != "hetpar-profile/1") {
    throw std::runtime_error(origin + ": not a hetpar profile (format \"hetpar-profile/1\")");
  }
  Profile p;
  p.measured_ = j.value("measured", nlohmann::json::object());
  p.cores_ = std::max(1, p.measured_.value("cores", 1));
  const auto optional_number = [&](const char* key, double fallback) {
    return j.contains(key) ? non_negative(j, key, origin) : fallback;
  };
  p.element_bytes_ = optional_number("element_bytes", 4);
  if (p.element_bytes_ != 2 && p.element_bytes_ != 4) {
    throw std::runtime_error(origin + ": \"element_bytes\" must be 2 (bf16) or 4 (fp32)");
  }
  p.peak_flops_ = optional_number("peak_flops_per_second", 0);
  p.gpus_per_node_ = static_cast<int>(optional_number("gpus_per_node", 0));
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
    p.memory_shared_ = memory->value("shared_by_all_ranks", false);
  }
  for (const auto& e : section(j, "gemm", origin)) {
    const std::string where = origin + ": gemm entry";
    const double forward = positive(e, "flops_per_second", where);
    // Profiles from published figures state one rate: the backward's GEMMs then run at it too.
    const double backward = e.contains("backward_flops_per_second") ? positive(e, "backward_flops_per_second", where)
                                                                   : forward;
    p.gemm_.push_back({std::log(positive(e, "m", where)), std::log(positive(e, "n", where)),
                       std::log(positive(e, "k", where)), forward, backward});
  }
  for (const auto& e : section(j, "attention", origin)) {
    const std::string where = origin + ": attention entry";
    const double heads = positive(e, "heads", where);
    p.attention_.push_back({positive(e, "batch", where) * heads, positive(e, "seq", where),
                            positive(e, "head_dim", where), e.value("causal", false),
                            e.value("kv_heads", heads) != heads,
                            positive(e, "forward_seconds", where), non_negative(e, "backward_seconds", where)});
  }
  for (const auto& e : section(j, "memory_bound", origin)) {
    const std::string where = origin + ": memory_bound entry";
    p.memory_.push_back({e.value("op", ""), positive(e, "bytes", where), positive(e, "bytes_per_second", where)});
  }
  const nlohmann::json layers = j.value("layers", nlohmann::json::array());  // optional: published profiles have none
  if (!layers.is_array()) throw std::runtime_error(origin + ": \"layers\" must be an array");
  for (const auto& e : layers) {
    const std::string where = origin + ": layers entry";
    const std::string module = e.value("module", "");
    if (module != "llm" && module != "encoder") {
      throw std::runtime_error(where + ": \"module\" must be \"llm\" or \"encoder\", got \"" + module + "\"");
    }
    p.layers_.push_back({module, positive(e, "sequences", where), positive(e, "seq", where), positive(e, "hidden", where),
                         positive(e, "heads", where), positive(e, "kv_heads", where), positive(e, "mlp", where),
                         positive(e, "forward_seconds", where), positive(e, "backward_seconds", where)});
  }
  for (const auto& e : section(j, "collectives", origin)) {
    const std::string where = origin + ": collective entry";
    Collective c{e.value("op", ""), e.value("scope", ""), e.value("group_size", 0), 0, 0, {}, 0, 0};
    if (c.scope != "" && c.scope != "intra_node" && c.scope != "inter_node") {
      throw std::runtime_error(where + " (" + c.op + "): \"scope\" must be \"intra_node\" or \"inter_node\", got \"" +
                               c.scope + "\"");
    }
    // The trainer's collectives sit between compute: the in-context
    // measurement where the profile has one, else the back-to-back one.
    const std::string prefix = e.contains("in_context_points") ? "in_context_" : "";
    if (e.contains(prefix + "bytes_per_second")) {
      c.latency = non_negative(e, (prefix + "latency_seconds").c_str(), where);
      c.bytes_per_second = positive(e, (prefix + "bytes_per_second").c_str(), where);
    }
    for (const auto& point : e.value(prefix + "points", nlohmann::json::array())) {
      c.points.emplace_back(positive(point, "bytes", where + " point"), non_negative(point, "seconds", where + " point"));
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
