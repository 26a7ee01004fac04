// The peak a rank's compute is measured against for MFU: a GPU's dense peak
// from the vendor table, or on CPU the fp32 GEMM rate one rank reaches here
// (measured at start-up with the rank's own thread count, all ranks at once,
// so it includes the contention the run itself will see).
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace hetpar {

struct ComputePeak {
  double flops_per_second = 0;  // per rank
  std::string source;           // how it was obtained, for the log and the results
};

// GEMM FLOP/s of this process, fp32 or bf16: square matmuls for about `seconds`.
double measure_cpu_gemm_flops(double seconds = 0.3, bool bf16 = false);

// A GPU's dense peak for the precision its matmuls run in (bf16, TF32 or
// fp32) from metrics/device_peaks.hpp; for a GPU the table lacks, the rate
// of large matmuls measured on it (a lower bound, and said so in `source`).
ComputePeak gpu_peak(const c10::Device& device, bool bf16, bool tf32);

// A readable name of this machine's CPU ("cpu: <model name>").
std::string cpu_device_name();

}  // namespace hetpar
