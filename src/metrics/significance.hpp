// Whether two samples of per-step values (OLD and NEW: step times, tokens/s
// per step) differ beyond noise: the ratio of their medians with a bootstrap
// confidence interval, and a rank test. Plain numbers in, numbers out.
#pragma once

#include <cstdint>
#include <vector>

namespace hetpar {

// Two-sided Mann–Whitney U test of `a` against `b`.
struct MannWhitney {
  double u = 0;        // pairs (a_i, b_j) with a_i > b_j, a tie counting 1/2; n_a * n_b / 2 when alike
  double p_value = 1;  // two-sided
  bool exact = false;  // p from the exact null distribution, else the normal approximation
};

// Exact p (the null distribution of U enumerated) when the samples have no
// ties and n_a * n_b <= kExactMannWhitneyPairs; otherwise the normal
// approximation with the tie correction of the variance and a continuity
// correction (good from about 8 values a side; below that, with ties, it is
// only a rough guide). Throws std::invalid_argument when a sample is empty
// or holds a value that is not finite.
MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);
inline constexpr int kExactMannWhitneyPairs = 400;

struct BootstrapOptions {
  int resamples = 2000;
  double level = 0.95;  // two-sided coverage of the interval
  uint64_t seed = 1;    // fixed: the same samples always give the same interval
};

// median(NEW) / median(OLD) and its percentile-bootstrap interval.
struct RatioInterval {
  double ratio = 1, low = 1, high = 1;
  bool excludes_one() const { return high < 1 || low > 1; }
};

// Each side is a list of runs, each run a list of per-step values; the
// median is over all steps of a side pooled. A resample draws the side's
// runs with replacement, then each drawn run's steps with replacement, so
// the interval widens with run-to-run noise (the larger part on a busy
// machine), not only with the step-to-step noise inside one run; with one
// run a side it is the plain bootstrap of the steps. The random draws are a
// 64-bit Mersenne twister from `options.seed`, mapped to indices without
// library-specific distributions, so an interval is the same on every
// platform. Throws std::invalid_argument when a side has no value or a value
// is not finite and positive (step times and rates always are).
RatioInterval bootstrap_median_ratio(const std::vector<std::vector<double>>& old_runs,
                                     const std::vector<std::vector<double>>& new_runs,
                                     const BootstrapOptions& options = {});

}  // namespace hetpar
