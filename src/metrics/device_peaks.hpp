// Dense peak TFLOPS per GPU model, for model FLOPs utilization (MFU).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace hetpar {

struct DevicePeak {
  std::string_view model;  // e.g. "H100 SXM"
  std::string_view match;  // matched at a word start in the device name, case-insensitively
  double bf16_tflops;      // tensor cores, dense (no sparsity)
  double tf32_tflops;      // tensor cores, dense
  double fp32_tflops;      // non-tensor FP32
};

// Every known model, more specific matches first.
const std::vector<DevicePeak>& device_peaks();

// The peaks of a device by its reported name ("NVIDIA H200", "NVIDIA H100 80GB HBM3");
// std::nullopt for an unknown device.
std::optional<DevicePeak> find_device_peak(std::string_view device_name);

}  // namespace hetpar
