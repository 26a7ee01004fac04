#include "plan/profile.hpp"

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
  for (const auto& e : section(j, "gemm", origin)) {
    const std::string where = origin + ": gemm entry";
    p.gemm_.push_back({positive(e, "m", where), positive(e, "n", where), positive(e, "k", where),
                       positive(e, "flops_per_second", where)});
  }
  for (const auto& e : section(j, "attention", origin)) {
    const std::string where = origin + ": attention entry";
    p.attention_.push_back({positive(e, "batch", where) * positive(e, "heads", where), positive(e, "seq", where),
                            positive(e, "head_dim", where), e.value("causal", false),
                            positive(e, "forward_seconds", where), non_negative(e, "backward_seconds", where)});
  }
  for (const auto& e : section(j, "memory_bound", origin)) {
    const std::string where = origin + ": memory_bound entry";
    p.memory_.push_back({e.value("op", ""), positive(e, "bytes", where), positive(e, "bytes_per_second", where)});
  }
  for (const auto& e : section(j, "collectives", origin)) {
    const std::string where = origin + ": collective entry";
    Collective c{e.value("op", ""), e.value("group_size", 0), 0, 0, {}};
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

double Profile::gemm_seconds(double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const Gemm& g = nearest(
      gemm_, [&](const Gemm& e) { return log_distance(m, e.m) + log_distance(n, e.n) + log_distance(k, e.k); }, "gemm");
  return 2 * m * n * k / g.flops_per_second;
}

double Profile::attention_seconds(double batch_heads, double seq, double head_dim, bool causal, bool backward) const {
  if (batch_heads <= 0 || seq <= 0) return 0;
  const Attention& a = nearest(
      attention_,
      [&](const Attention& e) {
        return log_distance(seq, e.seq) + log_distance(head_dim, e.head_dim) + (e.causal == causal ? 0 : 100);
      },
      "attention");
  const double scale = batch_heads / a.batch_heads * (seq / a.seq) * (seq / a.seq) * (head_dim / a.head_dim);
  return (backward ? a.backward : a.forward) * scale;
}

double Profile::memory_seconds(const std::string& op, double bytes) const {
  if (bytes <= 0) return 0;
  const MemoryBound& m = nearest(
      memory_, [&](const MemoryBound& e) { return log_distance(bytes, e.bytes) + (e.op == op ? 0 : 100); }, op);
  if (m.op != op) throw std::runtime_error("profile: no measurement of " + op);
  return bytes / m.bytes_per_second;
}

double Profile::collective_seconds(const std::string& op, int group_size, double bytes) const {
  if (group_size <= 1 || bytes <= 0) return 0;
  const Collective& c = nearest(
      collectives_,
      [&](const Collective& e) {
        return (e.op == op ? 0 : 100) + log_distance(static_cast<double>(group_size), static_cast<double>(std::max(e.group_size, 1)));
      },
      op);
  if (c.op != op) throw std::runtime_error("profile: no measurement of " + op);
  if (c.bytes_per_second > 0) return c.latency + bytes / c.bytes_per_second;
  const auto& [at, seconds] =
      nearest(c.points, [&](const std::pair<double, double>& pt) { return log_distance(bytes, pt.first); }, op);
  return seconds * std::max(1.0, bytes / at);
}

}  // namespace hetpar
