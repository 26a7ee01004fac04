#include "metrics/results_compare.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

#include "metrics/point_repeats.hpp"
#include "metrics/run_summary.hpp"
#include "metrics/step_samples.hpp"
#include "metrics/results_csv.hpp"

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

std::string percent_text(double fraction) { return printf_text("%g%%", fraction * 100.0); }

std::string signed_percent(double ratio) { return printf_text("%+.1f%%", (ratio - 1.0) * 100.0); }

// One metric of one matched point.
struct MetricChange {
  std::string old_text, new_text, change_text;
  std::string interval_text, p_text;  // tested only
  bool judged = false;  // figures on both sides
  bool tested = false;  // judged on per-step samples, with an interval
  bool beyond_drop = false, beyond_rise = false;  // the median moved past the threshold
  bool below_one = false, above_one = false;      // tested: the interval lies wholly below / above 1
  std::string untested_why;                       // judged but not tested: why
  // Untested changes are judged on the threshold alone, as nothing better is known.
  bool fell() const { return beyond_drop && (!tested || below_one); }
  bool rose() const { return beyond_rise && (!tested || above_one); }
};

void apply_threshold(MetricChange& m, double ratio, double threshold) {
  m.judged = true;
  m.beyond_drop = ratio < 1.0 - threshold;
  m.beyond_rise = ratio > 1.0 + threshold;
}

MetricChange with_values(const std::string& old_text, const std::string& new_text) {
  MetricChange m;
  m.old_text = old_text;
  m.new_text = new_text;
  return m;
}

MetricChange judge_medians(std::optional<double> o, std::optional<double> n, double threshold) {
  MetricChange m = with_values(value_text(o), value_text(n));
  m.change_text = "n/a";
  if (!o || !n || *o <= 0) return m;  // no baseline to take a ratio against
  apply_threshold(m, *n / *o, threshold);
  m.change_text = signed_percent(*n / *o);
  return m;
}

std::vector<double> flattened(const StepSamples& s) {
  std::vector<double> all;
  for (const std::vector<double>& run : s.runs) all.insert(all.end(), run.begin(), run.end());
  return all;
}

MetricChange judge_samples(const StepSamples& o, const StepSamples& n, double threshold,
                           const BootstrapOptions& bootstrap) {
  const std::vector<double> olds = flattened(o), news = flattened(n);
  MetricChange m = with_values(value_text(quantile(olds, 0.5)), value_text(quantile(news, 0.5)));
  const RatioInterval ci = bootstrap_median_ratio(o.runs, n.runs, bootstrap);
  const MannWhitney test = mann_whitney(news, olds);
  apply_threshold(m, ci.ratio, threshold);
  m.tested = true;
  m.below_one = ci.high < 1;
  m.above_one = ci.low > 1;
  m.change_text = signed_percent(ci.ratio);
  m.interval_text = "[" + signed_percent(ci.low) + ", " + signed_percent(ci.high) + "]";
  m.p_text = printf_text("p=%.2g", test.p_value);
  return m;
}

// Why a side's samples cannot be tested; "" when they can.
std::string samples_problem(const StepSamples& s, const char* side) {
  if (!s.problem.empty()) return std::string(side) + ": " + s.problem;
  if (s.count() < kMinStepsForSignificance) {
    return printf_text("%s: only %zu timed steps (at least %zu a side are needed)", side, s.count(),
                       kMinStepsForSignificance);
  }
  return "";
}

// One side of a matched point: its runs, the directory they are in, and their pooled record.
struct PointSide {
  const PointRuns& point;
  const std::string& dir;
  json pooled;
};

// One metric (a field of the records and of each step) of a point on both
// sides: on per-step samples when both sides have enough, else on the pooled
// records' medians.
MetricChange judge_metric(const char* field, const PointSide& o, const PointSide& n, double threshold,
                          const BootstrapOptions& bootstrap) {
  const StepSamples os = read_step_samples(o.point.runs, o.dir, field);
  const StepSamples ns = read_step_samples(n.point.runs, n.dir, field);
  std::string why = samples_problem(os, "OLD");
  if (why.empty()) why = samples_problem(ns, "NEW");
  if (why.empty()) return judge_samples(os, ns, threshold, bootstrap);
  MetricChange m = judge_medians(number_field(o.pooled, field), number_field(n.pooled, field), threshold);
  m.untested_why = why;
  return m;
}

// The verdict of a point whose runs are ok on both sides, from its metrics.
std::string metrics_verdict(const std::vector<MetricChange>& ms, double threshold) {
  const auto any = [&ms](auto predicate) { return std::any_of(ms.begin(), ms.end(), predicate); };
  std::string verdict = "ok";
  if (any([](const MetricChange& m) { return m.fell(); })) {
    verdict = "REGRESSED";
  } else if (any([](const MetricChange& m) { return m.rose(); })) {
    verdict = "improved";
  } else if (any([](const MetricChange& m) { return m.tested && m.beyond_drop; })) {
    verdict = "ok (drop within noise)";
  } else if (any([](const MetricChange& m) { return m.tested && m.below_one; })) {
    verdict = "ok (significant drop under " + percent_text(threshold) + ")";
  } else if (!any([](const MetricChange& m) { return m.judged; })) {
    return "n/a";  // neither side has figures to judge
  }
  if (any([](const MetricChange& m) { return m.judged && !m.tested; })) {
    verdict += " (no per-step samples: not tested for significance)";
  }
  return verdict;
}

// "now failed", or "now failed in 1 of 3 runs" for a point run several times.
std::string not_ok_text(const PointRuns& point) {
  const std::string status = point.status();
  if (point.runs.size() == 1) return "now " + status;
  size_t bad = 0;
  for (const json* r : point.runs) bad += string_field(*r, "status").value_or("") != "ok";
  return printf_text("now %s in %zu of %zu runs", status.c_str(), bad, point.runs.size());
}

std::string pad(const std::string& s, size_t width, bool right) {
  const std::string fill(width > s.size() ? width - s.size() : 0, ' ');
  return right ? fill + s : s + fill;
}

// "old -> new (change [interval] p)" with each part aligned across all rows of the column.
std::vector<std::string> metric_column(const std::vector<MetricChange>& ms) {
  size_t wo = 0, wn = 0, wc = 0, wi = 0;
  for (const MetricChange& m : ms) {
    wo = std::max(wo, m.old_text.size());
    wn = std::max(wn, m.new_text.size());
    wc = std::max(wc, m.change_text.size());
    wi = std::max(wi, m.interval_text.size());
  }
  std::vector<std::string> cells;
  for (const MetricChange& m : ms) {
    std::string tail = m.interval_text.empty() ? "" : " " + pad(m.interval_text, wi, true) + " " + m.p_text;
    cells.push_back(pad(m.old_text, wo, true) + " -> " + pad(m.new_text, wn, true) + " (" +
                    pad(m.change_text, wc, true) + tail + ")");
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

// What the columns mean and the rule the verdicts follow, printed under the table.
std::string rule_text(double threshold, const BootstrapOptions& b) {
  return "change: NEW/OLD of the median over the timed steps (after warm-up; repeats pooled) [its " +
         percent_text(b.level) + " bootstrap interval: " + std::to_string(b.resamples) +
         " resamples of the runs, then of each run's steps, seed " + std::to_string(b.seed) +
         "]\np: two-sided Mann-Whitney U test over the steps, for information\n"
         "rule: a point REGRESSED when TFLOPS/GPU or tokens/s fell by more than " + percent_text(threshold) +
         " and its interval lies wholly below no change; without per-step samples, on the medians alone\n";
}

// A matched point: its two metrics, its verdict, and why it was not tested (when it was not).
struct PointRow {
  std::string label;
  MetricChange tflops, tokens;
  std::string verdict, untested_why;
  size_t old_runs = 0, new_runs = 0;
  bool settings_differ = false;  // the two runs' configurations (config_hash) are not the same
  bool regressed() const { return verdict.rfind("REGRESSED", 0) == 0; }
};

// A point ok in OLD against the same label in NEW.
PointRow judge_point(const PointRuns& o, const std::string& old_dir, const PointRuns& n, const std::string& new_dir,
                     double threshold, const BootstrapOptions& bootstrap) {
  PointRow row;
  row.label = o.label;
  row.old_runs = o.runs.size();
  row.new_runs = n.runs.size();
  const json pooled_old = pooled_record(o);
  if (!n.ok()) {
    // A point that ran before and does not now is the worst regression of all.
    row.tflops = judge_medians(number_field(pooled_old, "tflops_per_gpu"), std::nullopt, threshold);
    row.tokens = judge_medians(number_field(pooled_old, "tokens_per_second"), std::nullopt, threshold);
    row.verdict = "REGRESSED (" + not_ok_text(n) + ")";
    return row;
  }
  const PointSide old_side{o, old_dir, pooled_old}, new_side{n, new_dir, pooled_record(n)};
  const json& old_hash = pooled_old.value("config_hash", json()), &new_hash = new_side.pooled.value("config_hash", json());
  row.settings_differ = old_hash.is_string() && new_hash.is_string() && old_hash != new_hash;
  row.tflops = judge_metric("tflops_per_gpu", old_side, new_side, threshold, bootstrap);
  row.tokens = judge_metric("tokens_per_second", old_side, new_side, threshold, bootstrap);
  const bool old_had_figures =
      number_field(pooled_old, "tflops_per_gpu") || number_field(pooled_old, "tokens_per_second");
  row.verdict = old_had_figures && !row.tflops.judged && !row.tokens.judged
                    ? "REGRESSED (no figures)"
                    : metrics_verdict({row.tflops, row.tokens}, threshold);
  for (const MetricChange* m : {&row.tflops, &row.tokens}) {
    if (m->judged && !m->tested) {
      row.untested_why = m->untested_why;
      break;
    }
  }
  return row;
}

std::string table_text(const std::vector<PointRow>& rows, const BootstrapOptions& bootstrap) {
  std::vector<MetricChange> tflops, tokens;
  for (const PointRow& row : rows) tflops.push_back(row.tflops), tokens.push_back(row.tokens);
  const std::vector<std::string> tcol = metric_column(tflops), kcol = metric_column(tokens);
  const std::string change = " old -> new (change [" + percent_text(bootstrap.level) + " interval] p)";
  std::vector<std::vector<std::string>> table = {{"label", "TFLOPS/GPU" + change, "tokens/s" + change, "verdict"}};
  for (size_t i = 0; i < rows.size(); ++i) table.push_back({rows[i].label, tcol[i], kcol[i], rows[i].verdict});
  return render_table(table);
}

// What was left out of the records or pooled, when anything was.
std::string records_notes(const PointIndex& olds, const PointIndex& news, const std::vector<PointRow>& rows) {
  std::string text;
  if (olds.unlabeled + news.unlabeled > 0) {
    text += printf_text("%d records without a label ignored\n", olds.unlabeled + news.unlabeled);
  }
  if (olds.superseded + news.superseded > 0) {
    text += printf_text("%d records superseded by a later record of the same run: the last of each was used\n",
                        olds.superseded + news.superseded);
  }
  size_t most_old = 0, most_new = 0;
  for (const PointRow& row : rows) {
    most_old = std::max(most_old, row.old_runs);
    most_new = std::max(most_new, row.new_runs);
  }
  if (most_old > 1 || most_new > 1) {
    text += printf_text("repeats pooled: up to %zu runs a point in OLD, %zu in NEW\n", most_old, most_new);
  }
  return text;
}

}  // namespace

ResultSet read_result_set(const std::string& path_or_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path(path_or_dir);
  ResultSet set;
  set.records = read_results(path_or_dir);
  set.dir = fs::is_directory(path, ec) ? path.string() : path.parent_path().string();
  if (set.dir.empty()) set.dir = ".";
  return set;
}

ResultsComparison compare_results(const ResultSet& old_set, const ResultSet& new_set, double threshold,
                                  const BootstrapOptions& bootstrap) {
  if (!(threshold >= 0 && threshold < 1)) {
    throw std::invalid_argument("threshold " + printf_text("%g", threshold) + " is not a fraction in [0, 1)");
  }
  const PointIndex olds = index_points(old_set.records);
  const PointIndex news = index_points(new_set.records);
  ResultsComparison result;
  std::vector<PointRow> rows;
  int not_ok_old = 0, recovered = 0;
  for (const PointRuns& o : olds.points) {
    const PointRuns* n = news.find(o.label);
    if (!o.ok()) {
      ++not_ok_old;
      recovered += n && n->ok();
    } else if (!n) {
      result.only_old.push_back(o.label);
    } else {
      rows.push_back(judge_point(o, old_set.dir, *n, new_set.dir, threshold, bootstrap));
      result.regressions += rows.back().regressed();
    }
  }
  for (const PointRuns& n : news.points) {
    if (!olds.find(n.label) && n.ok()) result.only_new.push_back(n.label);
  }
  result.matched = static_cast<int>(rows.size());

  std::string& text = result.text;
  text += rows.empty() ? "no point appears in both sets\n" : table_text(rows, bootstrap);
  for (const std::string& l : result.only_old) text += "only in OLD: " + l + '\n';
  for (const std::string& l : result.only_new) text += "only in NEW: " + l + '\n';
  for (const PointRow& row : rows) {
    if (!row.untested_why.empty()) text += "not tested for significance: " + row.label + ": " + row.untested_why + '\n';
  }
  // A label names a point of a sweep file, not its settings: an edited sweep or base run measures another setup.
  for (const PointRow& row : rows) {
    if (row.settings_differ) {
      text += "settings differ: " + row.label + " ran another configuration in NEW (config_hash): its change is "
              "not the code's or the machine's alone\n";
    }
  }
  if (not_ok_old > 0) {
    text += printf_text("%d points were not ok in OLD (failed, diverged or invalid): nothing to compare; %d of them "
                        "are ok in NEW\n", not_ok_old, recovered);
  }
  text += records_notes(olds, news, rows);
  // Numbers from different hardware or code are not a like-for-like comparison.
  for (const char* key : {"device", "commit"}) {
    const std::string a = distinct_values(old_set.records, key), b = distinct_values(new_set.records, key);
    if (a != b) text += std::string(key) + ": " + (a.empty() ? "?" : a) + " -> " + (b.empty() ? "?" : b) + '\n';
  }
  text += rule_text(threshold, bootstrap);
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
