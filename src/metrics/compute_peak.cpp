#include "metrics/compute_peak.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>

#include "metrics/device_peaks.hpp"

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

ComputePeak gpu_peak(const c10::Device& device, bool bf16, bool tf32) {
  const std::string name = at::cuda::getDeviceProperties(device.index())->name;
  const char* precision = bf16 ? "bf16" : tf32 ? "TF32" : "fp32";
  if (const auto p = find_device_peak(name)) {
    const double tflops = bf16 ? p->bf16_tflops : tf32 ? p->tf32_tflops : p->fp32_tflops;
    return {tflops * 1e12, fmt::format("dense {} peak of the {}, {:.0f} TFLOPS (published figure)", precision,
                                       p->model, tflops)};
  }
  constexpr int64_t n = 8192;
  const auto options = at::TensorOptions(bf16 ? at::kBFloat16 : at::kFloat).device(device);
  const at::Tensor a = at::rand({n, n}, options), b = at::rand({n, n}, options);
  at::Tensor c = at::mm(a, b);  // warm-up
  c10::cuda::device_synchronize();
  constexpr int kIterations = 10;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) at::mm_out(c, a, b);
  c10::cuda::device_synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {2.0 * n * n * n * kIterations / seconds,
          fmt::format("measured {} GEMM rate of {} ({}^3 matmuls): not in the peak table, so MFU is against a lower "
                      "bound of its peak", precision, name, n)};
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
