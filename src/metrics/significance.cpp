#include "metrics/significance.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "metrics/run_summary.hpp"

namespace hetpar {
namespace {

void require_finite(const std::vector<double>& values, const char* what) {
  if (values.empty()) throw std::invalid_argument(std::string(what) + " is empty");
  for (const double v : values) {
    if (!std::isfinite(v)) throw std::invalid_argument(std::string(what) + " holds a value that is not finite");
  }
}

struct RankSums {
  double rank_sum_a = 0;
  double tie_term = 0;  // sum over groups of tied values of t^3 - t
};

// Ranks of the pooled samples (ties get their mean rank): a's rank sum and the tie term.
RankSums rank_sums(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<std::pair<double, bool>> pooled;  // value, from a
  for (const double v : a) pooled.emplace_back(v, true);
  for (const double v : b) pooled.emplace_back(v, false);
  std::sort(pooled.begin(), pooled.end());
  RankSums s;
  for (size_t i = 0; i < pooled.size();) {
    size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) s.rank_sum_a += pooled[k].second ? mean_rank : 0.0;
    s.tie_term += t * t * t - t;
    i = j;
  }
  return s;
}

// P(U = u) for u = 0..m*n under the null, by the recurrence on the largest
// value: it is one of a's with probability m/(m+n) (and then exceeds all n of
// b's), else one of b's. Probabilities rather than counts: no overflow.
std::vector<double> exact_u_distribution(size_t m, size_t n) {
  // table[i][j]: the distribution for sizes i and j.
  std::vector<std::vector<std::vector<double>>> table(m + 1, std::vector<std::vector<double>>(n + 1));
  for (size_t i = 0; i <= m; ++i) {
    for (size_t j = 0; j <= n; ++j) {
      std::vector<double>& d = table[i][j];
      d.assign(i * j + 1, 0.0);
      if (i == 0 || j == 0) {
        d[0] = 1.0;
        continue;
      }
      const double from_a = static_cast<double>(i) / static_cast<double>(i + j);
      const std::vector<double>& a_largest = table[i - 1][j];
      const std::vector<double>& b_largest = table[i][j - 1];
      for (size_t u = 0; u < a_largest.size(); ++u) d[u + j] += from_a * a_largest[u];
      for (size_t u = 0; u < b_largest.size(); ++u) d[u] += (1.0 - from_a) * b_largest[u];
    }
  }
  return table[m][n];
}

double exact_two_sided_p(double u, size_t m, size_t n) {
  const std::vector<double> d = exact_u_distribution(m, n);
  const auto k = static_cast<size_t>(std::llround(u));  // no ties: U is an integer
  double below = 0, above = 0;
  for (size_t v = 0; v < d.size(); ++v) {
    if (v <= k) below += d[v];
    if (v >= k) above += d[v];
  }
  return std::min(1.0, 2.0 * std::min(below, above));
}

double normal_two_sided_p(double u, double m, double n, double tie_term) {
  const double total = m + n;
  const double mean = m * n / 2.0;
  const double variance = m * n / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
  if (!(variance > 0)) return 1.0;  // every value tied: nothing tells the samples apart
  const double z = std::max(0.0, std::fabs(u - mean) - 0.5) / std::sqrt(variance);
  return std::min(1.0, std::erfc(z / std::sqrt(2.0)));
}

// An index in [0, n). The modulo's bias (n / 2^64) is far below anything a
// bootstrap can see, and unlike std::uniform_int_distribution it is the same
// in every standard library.
size_t draw(std::mt19937_64& rng, size_t n) { return static_cast<size_t>(rng() % n); }

using Runs = std::vector<std::vector<double>>;

// The runs that have values; throws when none has, or a value is not finite
// and positive (step times and rates are; a zero would leave a median with no
// ratio).
Runs nonempty_runs(const Runs& runs, const char* side) {
  Runs out;
  for (const std::vector<double>& run : runs) {
    if (run.empty()) continue;
    for (const double v : run) {
      if (!(std::isfinite(v) && v > 0)) {
        throw std::invalid_argument(std::string(side) + " holds a value that is not finite and positive");
      }
    }
    out.push_back(run);
  }
  if (out.empty()) throw std::invalid_argument(std::string(side) + " has no value");
  return out;
}

double pooled_median(const Runs& runs) {
  std::vector<double> all;
  for (const std::vector<double>& run : runs) all.insert(all.end(), run.begin(), run.end());
  return quantile(std::move(all), 0.5);
}

// One bootstrap replicate of a side's median: runs drawn, then steps within each drawn run.
double resampled_median(const Runs& runs, std::mt19937_64& rng, std::vector<double>& scratch) {
  scratch.clear();
  for (size_t k = 0; k < runs.size(); ++k) {
    const std::vector<double>& run = runs[draw(rng, runs.size())];
    for (size_t i = 0; i < run.size(); ++i) scratch.push_back(run[draw(rng, run.size())]);
  }
  return quantile(scratch, 0.5);
}

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  require_finite(a, "the first sample");
  require_finite(b, "the second sample");
  const double m = static_cast<double>(a.size()), n = static_cast<double>(b.size());
  const RankSums s = rank_sums(a, b);
  MannWhitney result;
  result.u = s.rank_sum_a - m * (m + 1.0) / 2.0;
  result.exact = s.tie_term == 0 && m * n <= kExactMannWhitneyPairs;
  result.p_value = result.exact ? exact_two_sided_p(result.u, a.size(), b.size())
                                : normal_two_sided_p(result.u, m, n, s.tie_term);
  return result;
}

RatioInterval bootstrap_median_ratio(const Runs& old_runs, const Runs& new_runs, const BootstrapOptions& options) {
  if (options.resamples < 1) throw std::invalid_argument("the bootstrap needs at least one resample");
  if (!(options.level > 0 && options.level < 1)) throw std::invalid_argument("the confidence level must be in (0, 1)");
  const Runs olds = nonempty_runs(old_runs, "OLD"), news = nonempty_runs(new_runs, "NEW");
  RatioInterval interval;
  interval.ratio = pooled_median(news) / pooled_median(olds);

  std::mt19937_64 rng(options.seed);
  std::vector<double> ratios, scratch;
  ratios.reserve(static_cast<size_t>(options.resamples));
  for (int r = 0; r < options.resamples; ++r) {
    const double o = resampled_median(olds, rng, scratch);
    ratios.push_back(resampled_median(news, rng, scratch) / o);
  }
  interval.low = quantile(ratios, (1.0 - options.level) / 2.0);
  interval.high = quantile(std::move(ratios), (1.0 + options.level) / 2.0);
  return interval;
}

}  // namespace hetpar
