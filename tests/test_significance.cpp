// The statistics of the regression check: the Mann–Whitney U test (exact
// and normal approximation) and the bootstrap interval of a ratio of medians,
// on cases whose answers can be checked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "metrics/significance.hpp"

namespace hetpar {
namespace {

// `n` values spread evenly over center * (1 +- spread): a sample with a
// known median (`center`) and no random numbers.
std::vector<double> around(double center, double spread, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(center * (1.0 + spread * (2.0 * i / (n - 1) - 1.0)));
  return v;
}

TEST(MannWhitney, CountsPairsOnATinyExample) {
  // Pairs with a > b: (3, 2), (5, 2), (5, 4).
  const MannWhitney t = mann_whitney({1, 3, 5}, {2, 4, 6});
  EXPECT_DOUBLE_EQ(t.u, 3.0);
  EXPECT_TRUE(t.exact);
  // Of the C(6, 3) = 20 equally likely orders, U <= 3 in 1 + 1 + 2 + 3 = 7.
  EXPECT_NEAR(t.p_value, 2.0 * 7.0 / 20.0, 1e-12);
}

TEST(MannWhitney, ExactPOfSeparatedSamples) {
  // All of a below all of b: U = 0, one order in C(6, 3) = 20 on each side.
  const MannWhitney small = mann_whitney({1, 2, 3}, {4, 5, 6});
  EXPECT_DOUBLE_EQ(small.u, 0.0);
  EXPECT_NEAR(small.p_value, 2.0 / 20.0, 1e-12);
  // 10 against 10: 2 / C(20, 10).
  std::vector<double> low, high;
  for (int i = 1; i <= 10; ++i) low.push_back(i), high.push_back(10 + i);
  const MannWhitney t = mann_whitney(high, low);
  EXPECT_DOUBLE_EQ(t.u, 100.0);
  EXPECT_TRUE(t.exact);
  EXPECT_NEAR(t.p_value, 2.0 / 184756.0, 1e-15);
}

TEST(MannWhitney, TiesCountHalfAndUseTheNormalApproximation) {
  // Pairs: (2, 2) twice count 1/2 each; nothing else has a > b.
  const MannWhitney t = mann_whitney({1, 2, 2}, {2, 3});
  EXPECT_DOUBLE_EQ(t.u, 1.0);
  EXPECT_FALSE(t.exact);
  // 8 ones against 8 twos: U = 0, mean 32, variance 64/12 * (17 - 2 * (8^3 - 8) / (16 * 15)) = 68.2667;
  // z = (32 - 0.5) / sqrt(68.2667) = 3.81247, p = erfc(z / sqrt 2).
  const MannWhitney tied = mann_whitney(std::vector<double>(8, 1.0), std::vector<double>(8, 2.0));
  EXPECT_DOUBLE_EQ(tied.u, 0.0);
  EXPECT_NEAR(tied.p_value, 1.3758605716602916e-4, 1e-12);
}

TEST(MannWhitney, NormalApproximationForLargeSamples) {
  // 25 against 25 (625 pairs > kExactMannWhitneyPairs), separated: U = 0, mean 312.5,
  // variance 625 * 51 / 12; z = 312 / sqrt(2656.25) = 6.05369.
  std::vector<double> low, high;
  for (int i = 1; i <= 25; ++i) low.push_back(i), high.push_back(100 + i);
  const MannWhitney t = mann_whitney(low, high);
  EXPECT_FALSE(t.exact);
  EXPECT_NEAR(t.p_value, 1.4156562248495634e-9, 1e-16);
}

TEST(MannWhitney, IdenticalSamplesGiveOne) {
  const std::vector<double> a = around(100, 0.1, 12);
  const MannWhitney t = mann_whitney(a, a);
  EXPECT_DOUBLE_EQ(t.u, 72.0);  // n^2 / 2
  EXPECT_DOUBLE_EQ(t.p_value, 1.0);
  EXPECT_DOUBLE_EQ(mann_whitney(std::vector<double>(9, 3.0), std::vector<double>(9, 3.0)).p_value, 1.0);
}

TEST(MannWhitney, RefusesEmptyOrNonFiniteSamples) {
  EXPECT_THROW(mann_whitney({}, {1.0}), std::invalid_argument);
  EXPECT_THROW(mann_whitney({1.0, NAN}, {1.0}), std::invalid_argument);
}

TEST(BootstrapMedianRatio, IdenticalSamplesGiveOne) {
  const std::vector<double> a = around(100, 0.1, 12);
  const RatioInterval r = bootstrap_median_ratio({a}, {a});
  EXPECT_DOUBLE_EQ(r.ratio, 1.0);
  EXPECT_LT(r.low, 1.0);
  EXPECT_GT(r.high, 1.0);
  EXPECT_FALSE(r.excludes_one());
}

TEST(BootstrapMedianRatio, AClearShiftExcludesOne) {
  const std::vector<double> before = around(100, 0.01, 12), after = around(80, 0.01, 12);
  const RatioInterval r = bootstrap_median_ratio({before}, {after});
  EXPECT_NEAR(r.ratio, 0.8, 1e-9);  // the medians are exactly 100 and 80
  EXPECT_LT(r.high, 1.0);
  EXPECT_TRUE(r.excludes_one());
  // The interval of medians of values within +-1% stays within +-2% of the ratio.
  EXPECT_GT(r.low, 0.8 * 0.98);
  EXPECT_LT(r.high, 0.8 * 1.02);
  EXPECT_LT(mann_whitney(after, before).p_value, 1e-5);
}

TEST(BootstrapMedianRatio, ReproducibleWithItsSeed) {
  const std::vector<double> a = around(100, 0.1, 10), b = around(95, 0.1, 13);
  const RatioInterval first = bootstrap_median_ratio({a}, {b});
  const RatioInterval again = bootstrap_median_ratio({a}, {b});
  EXPECT_EQ(first.low, again.low);
  EXPECT_EQ(first.high, again.high);
  BootstrapOptions other;
  other.seed = 7;
  const RatioInterval reseeded = bootstrap_median_ratio({a}, {b}, other);
  EXPECT_EQ(reseeded.ratio, first.ratio);
  EXPECT_TRUE(reseeded.low != first.low || reseeded.high != first.high);
  EXPECT_NEAR(reseeded.low, first.low, 0.02);  // another draw, the same answer within its noise
  EXPECT_NEAR(reseeded.high, first.high, 0.02);
}

TEST(BootstrapMedianRatio, RunToRunNoiseWidensTheInterval) {
  // Three runs a side, each steady (+-0.5%) but at its own level (+-4%), as on
  // a busy machine; NEW's median is 5% lower.
  const std::vector<std::vector<double>> olds = {around(96, 0.005, 8), around(100, 0.005, 8), around(104, 0.005, 8)};
  const std::vector<std::vector<double>> news = {around(91, 0.005, 8), around(95, 0.005, 8), around(99, 0.005, 8)};
  const RatioInterval by_run = bootstrap_median_ratio(olds, news);
  EXPECT_NEAR(by_run.ratio, 0.95, 1e-9);
  EXPECT_FALSE(by_run.excludes_one()) << by_run.low << " " << by_run.high;
  // The same steps taken as one run a side see only the step-to-step noise
  // and would call the drop significant.
  const auto as_one_run = [](const std::vector<std::vector<double>>& runs) {
    std::vector<double> all;
    for (const auto& r : runs) all.insert(all.end(), r.begin(), r.end());
    return std::vector<std::vector<double>>{all};
  };
  const RatioInterval by_step = bootstrap_median_ratio(as_one_run(olds), as_one_run(news));
  EXPECT_TRUE(by_step.excludes_one()) << by_step.low << " " << by_step.high;
  EXPECT_GT(by_step.low, by_run.low);
}

TEST(BootstrapMedianRatio, LevelAndResamplesShapeTheInterval) {
  const std::vector<double> a = around(100, 0.1, 12), b = around(98, 0.1, 12);
  BootstrapOptions narrow;
  narrow.level = 0.5;
  const RatioInterval wide = bootstrap_median_ratio({a}, {b}), half = bootstrap_median_ratio({a}, {b}, narrow);
  EXPECT_LE(wide.low, half.low);
  EXPECT_GE(wide.high, half.high);
  BootstrapOptions bad;
  bad.resamples = 0;
  EXPECT_THROW(bootstrap_median_ratio({a}, {b}, bad), std::invalid_argument);
  bad = {};
  bad.level = 1.0;
  EXPECT_THROW(bootstrap_median_ratio({a}, {b}, bad), std::invalid_argument);
}

TEST(BootstrapMedianRatio, RefusesSidesWithoutPositiveValues) {
  EXPECT_THROW(bootstrap_median_ratio({}, {{1.0}}), std::invalid_argument);
  EXPECT_THROW(bootstrap_median_ratio({{}}, {{1.0}}), std::invalid_argument);
  EXPECT_THROW(bootstrap_median_ratio({{1.0, 0.0}}, {{1.0}}), std::invalid_argument);
  EXPECT_THROW(bootstrap_median_ratio({{1.0}}, {{INFINITY}}), std::invalid_argument);
  // An empty run beside others is skipped, not an error.
  EXPECT_DOUBLE_EQ(bootstrap_median_ratio({{2.0, 2.0}, {}}, {{3.0}}).ratio, 1.5);
}

}  // namespace
}  // namespace hetpar
