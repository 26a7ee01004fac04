#include "metrics/results_compare.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

namespace hetpar {
namespace {

using nlohmann::json;

std::optional<std::string> string_field(const json& r, const char* key) {
  if (!r.is_object()) return std::nullopt;
  const auto it = r.find(key);
  if (it == r.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<double> number_field(const json& r, const char* key) {
  if (!r.is_object()) return std::nullopt;
  const auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

template <typename... Args>
std::string printf_text(const char* format, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// Readable at a glance: 4 significant digits, but no exponent for large rates.
std::string value_text(std::optional<double> v) {
  if (!v) return "-";
  return std::fabs(*v) >= 1000 ? printf_text("%.0f", *v) : printf_text("%.4g", *v);
}

// The last record of each label in one set (a rerun appended to the same file
// supersedes the earlier record), in first-seen order; counts what was left out.
struct Side {
  std::vector<std::string> labels;
  std::map<std::string, const json*> by_label;
  int unlabeled = 0, duplicates = 0;
  bool ok(const std::string& label) const {
    const auto it = by_label.find(label);
    return it != by_label.end() && string_field(*it->second, "status").value_or("") == "ok";
  }
};

Side index_side(const std::vector<json>& records) {
  Side s;
  for (const json& r : records) {
    const std::optional<std::string> label = string_field(r, "label");
    if (!label) {
      ++s.unlabeled;
      continue;
    }
    auto [it, inserted] = s.by_label.try_emplace(*label, &r);
    if (inserted) {
      s.labels.push_back(*label);
    } else {
      it->second = &r;
      ++s.duplicates;
    }
  }
  return s;
}

// The distinct values of a field across a set, joined; "" when no record has it.
std::string distinct_values(const std::vector<json>& records, const char* key) {
  std::set<std::string> seen;
  for (const json& r : records) {
    if (auto v = string_field(r, key)) seen.insert(*v);
  }
  std::string out;
  for (const std::string& v : seen) out += (out.empty() ? "" : ", ") + v;
  return out;
}

// One metric of one matched pair.
struct MetricChange {
  std::string old_text, new_text, change_text;
  bool fell = false, rose = false, judged = false;
};

MetricChange judge(std::optional<double> o, std::optional<double> n, double threshold) {
  MetricChange m{value_text(o), value_text(n), "n/a"};
  if (!o || !n || *o <= 0) return m;  // no baseline to take a ratio against
  m.judged = true;
  m.change_text = printf_text("%+.1f%%", (*n / *o - 1.0) * 100.0);
  m.fell = *n < *o * (1.0 - threshold);
  m.rose = *n > *o * (1.0 + threshold);
  return m;
}

std::string pad(const std::string& s, size_t width, bool right) {
  const std::string fill(width > s.size() ? width - s.size() : 0, ' ');
  return right ? fill + s : s + fill;
}

// "old -> new (change)" with each part aligned across all rows of the column.
std::vector<std::string> metric_column(const std::vector<MetricChange>& ms) {
  size_t wo = 0, wn = 0, wc = 0;
  for (const MetricChange& m : ms) {
    wo = std::max(wo, m.old_text.size());
    wn = std::max(wn, m.new_text.size());
    wc = std::max(wc, m.change_text.size());
  }
  std::vector<std::string> cells;
  for (const MetricChange& m : ms) {
    cells.push_back(pad(m.old_text, wo, true) + " -> " + pad(m.new_text, wn, true) + " (" +
                    pad(m.change_text, wc, true) + ")");
  }
  return cells;
}

// Left-aligned columns two spaces apart; the last column is not padded.
std::string render_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? pad(row[i], widths[i], false) + "  " : row[i];
    }
    out += line + '\n';
  }
  return out;
}

std::string percent_text(double fraction) { return printf_text("%g%%", fraction * 100.0); }

}  // namespace

ResultsComparison compare_results(const std::vector<json>& old_records, const std::vector<json>& new_records,
                                  double threshold) {
  if (!(threshold >= 0 && threshold < 1)) {
    throw std::invalid_argument("threshold " + printf_text("%g", threshold) + " is not a fraction in [0, 1)");
  }
  const Side olds = index_side(old_records);
  const Side news = index_side(new_records);
  ResultsComparison result;

  std::vector<std::string> labels, verdicts;
  std::vector<MetricChange> tflops, tokens;
  int not_ok_old = 0, recovered = 0;
  for (const std::string& label : olds.labels) {
    if (!olds.ok(label)) {
      ++not_ok_old;
      recovered += news.ok(label);
      continue;
    }
    const auto it = news.by_label.find(label);
    if (it == news.by_label.end()) {
      result.only_old.push_back(label);
      continue;
    }
    const json& o = *olds.by_label.at(label);
    const json& n = *it->second;
    MetricChange t = judge(number_field(o, "tflops_per_gpu"), number_field(n, "tflops_per_gpu"), threshold);
    MetricChange k = judge(number_field(o, "tokens_per_second"), number_field(n, "tokens_per_second"), threshold);
    const bool old_had_figures = number_field(o, "tflops_per_gpu") || number_field(o, "tokens_per_second");
    std::string verdict = "ok";
    if (!news.ok(label)) {
      // A point that ran before and does not now is the worst regression of all.
      verdict = "REGRESSED (now " + string_field(n, "status").value_or("without status") + ")";
      ++result.regressions;
    } else if (old_had_figures && !t.judged && !k.judged) {
      verdict = "REGRESSED (no figures)";
      ++result.regressions;
    } else if (t.fell || k.fell) {
      verdict = "REGRESSED";
      ++result.regressions;
    } else if (t.rose || k.rose) {
      verdict = "improved";
    } else if (!t.judged && !k.judged) {
      verdict = "n/a";  // neither side has figures to judge
    }
    labels.push_back(label);
    verdicts.push_back(verdict);
    tflops.push_back(std::move(t));
    tokens.push_back(std::move(k));
  }
  for (const std::string& label : news.labels) {
    if (!olds.by_label.contains(label) && news.ok(label)) result.only_new.push_back(label);
  }
  result.matched = static_cast<int>(labels.size());

  std::string& text = result.text;
  if (labels.empty()) {
    text += "no point appears in both sets\n";
  } else {
    const std::vector<std::string> tcol = metric_column(tflops), kcol = metric_column(tokens);
    std::vector<std::vector<std::string>> rows = {
        {"label", "TFLOPS/GPU old -> new (change)", "tokens/s old -> new (change)", "verdict"}};
    for (size_t i = 0; i < labels.size(); ++i) rows.push_back({labels[i], tcol[i], kcol[i], verdicts[i]});
    text += render_table(rows);
  }
  for (const std::string& l : result.only_old) text += "only in OLD: " + l + '\n';
  for (const std::string& l : result.only_new) text += "only in NEW: " + l + '\n';

  if (not_ok_old > 0) {
    text += printf_text("%d points were not ok in OLD (failed, diverged or invalid): nothing to compare; %d of them "
                        "are ok in NEW\n", not_ok_old, recovered);
  }
  if (olds.unlabeled + news.unlabeled > 0) {
    text += printf_text("%d ok records without a label ignored\n", olds.unlabeled + news.unlabeled);
  }
  if (olds.duplicates + news.duplicates > 0) {
    text += printf_text("%d repeated labels: the last record of each was used\n", olds.duplicates + news.duplicates);
  }
  // Numbers from different hardware or code are not a like-for-like comparison.
  for (const char* key : {"device", "commit"}) {
    const std::string a = distinct_values(old_records, key), b = distinct_values(new_records, key);
    if (a != b) text += std::string(key) + ": " + (a.empty() ? "?" : a) + " -> " + (b.empty() ? "?" : b) + '\n';
  }
  text += printf_text("%d points compared, %d regressed beyond ", result.matched, result.regressions) +
          percent_text(threshold) + '\n';
  return result;
}

double parse_threshold(const std::string& text) {
  const auto bad = [&text](const std::string& why) {
    return std::invalid_argument("bad threshold '" + text + "': " + why);
  };
  const size_t first = text.find_first_not_of(" \t");
  const size_t last = text.find_last_not_of(" \t");
  if (first == std::string::npos) throw bad("empty; write e.g. 5% or 0.05");
  std::string_view s(text.data() + first, last - first + 1);
  const bool percent = s.back() == '%';
  if (percent) {
    s.remove_suffix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) {
    throw bad("not a number; write e.g. 5% or 0.05");
  }
  if (percent) {
    if (value < 0 || value >= 100) throw bad("a percentage must be in [0%, 100%)");
    return value / 100.0;
  }
  if (value < 0 || value >= 1) throw bad("a bare number must be a fraction in [0, 1) like 0.05; or write 5%");
  return value;
}

}  // namespace hetpar
