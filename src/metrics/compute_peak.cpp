#include "metrics/compute_peak.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <fstream>

namespace hetpar {

double measure_cpu_gemm_flops(double seconds, bool bf16) {
  constexpr int64_t n = 384;  // big enough for the blocked kernel, small enough to stay in cache
  const at::ScalarType dtype = bf16 ? at::kBFloat16 : at::kFloat;
  const at::Tensor a = at::rand({n, n}, dtype), b = at::rand({n, n}, dtype);
  at::Tensor c = at::mm(a, b);  // warm-up
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int64_t iterations = 0;
  double elapsed = 0;
  do {
    at::mm_out(c, a, b);
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return 2.0 * n * n * n * static_cast<double>(iterations) / elapsed;
}

std::string cpu_device_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return "cpu: " + line.substr(colon + 2);
  }
  return "cpu";
}

}  // namespace hetpar
