// A collective's time as latency + bytes / bandwidth (the alpha-beta model),
// fitted by least squares to measured (bytes, seconds) points. Torch-free.
#pragma once

#include <stdexcept>
#include <utility>
#include <vector>

namespace hetpar {

struct AlphaBeta {
  double latency_seconds = 0;   // alpha, >= 0
  double bytes_per_second = 0;  // 1 / beta, > 0
  double seconds(double bytes) const { return latency_seconds + bytes / bytes_per_second; }
};

// Least squares of seconds = a + b * bytes over POINTS (at least two distinct
// sizes). A negative intercept (latency below the noise) is clamped to 0 and
// the slope refitted through the origin; a slope <= 0 (time not growing with
// size) throws std::invalid_argument: such points say nothing about bandwidth.
inline AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) throw std::invalid_argument("an alpha-beta fit needs at least two points");
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double det = n * sxx - sx * sx;
  if (det <= 0) throw std::invalid_argument("an alpha-beta fit needs two different message sizes");
  double slope = (n * sxy - sx * sy) / det;
  double intercept = (sy - slope * sx) / n;
  if (intercept < 0) {
    intercept = 0;
    slope = sxy / sxx;
  }
  if (slope <= 0) throw std::invalid_argument("the measured times do not grow with the message size");
  return {intercept, 1.0 / slope};
}

}  // namespace hetpar
