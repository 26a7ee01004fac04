// The alpha-beta fit of collective times: exact on exact points, latency
// never negative, and no bandwidth claimed from points that do not grow.
#include <gtest/gtest.h>

#include "plan/alpha_beta_fit.hpp"

namespace hetpar {
namespace {

TEST(AlphaBetaFit, RecoversAnExactLine) {
  const AlphaBeta f = fit_alpha_beta({{1e3, 20e-6 + 1e3 / 2e9}, {1e6, 20e-6 + 1e6 / 2e9}, {8e6, 20e-6 + 8e6 / 2e9}});
  EXPECT_NEAR(f.latency_seconds, 20e-6, 1e-12);
  EXPECT_NEAR(f.bytes_per_second, 2e9, 1e-3 * 2e9);
  EXPECT_NEAR(f.seconds(4e6), 20e-6 + 4e6 / 2e9, 1e-12);
}

TEST(AlphaBetaFit, ANegativeInterceptBecomesZeroLatency) {
  const AlphaBeta f = fit_alpha_beta({{1e6, 1e-3}, {2e6, 3e-3}, {3e6, 5e-3}});  // the line's intercept: -1 ms
  EXPECT_EQ(f.latency_seconds, 0.0);
  EXPECT_GT(f.bytes_per_second, 0.0);
}

TEST(AlphaBetaFit, PointsThatSayNothingThrow) {
  EXPECT_THROW(fit_alpha_beta({{1e3, 1e-3}}), std::invalid_argument);
  EXPECT_THROW(fit_alpha_beta({{1e3, 1e-3}, {1e3, 2e-3}}), std::invalid_argument);
  EXPECT_THROW(fit_alpha_beta({{1e3, 2e-3}, {1e6, 1e-3}}), std::invalid_argument);
}

}  // namespace
}  // namespace hetpar
