// The figures of a training run: model FLOPs per step, TFLOPS per rank, MFU
// against the compute peak, tokens/s (LLM and image tokens apart),
// samples/s, memory and per-phase time, as one JSON line per step, plus the
// metadata every result carries (commit, versions, device, layouts...).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "data/batch_source.hpp"
#include "dist/runtime.hpp"
#include "metrics/compute_peak.hpp"
#include "train/step_report.hpp"

namespace hetpar {

class RunMetrics {
 public:
  // On the CPU a collective: every rank measures its compute peak at the same
  // time. On a GPU the peak is the device's dense figure for the precision in
  // use (metrics/device_peaks.hpp), measured only for a GPU the table lacks.
  RunMetrics(const RunConfig& config, Runtime& runtime, const BatchSource& data, const at::Device& device);

  struct StepInputs {
    int64_t step = 0;
    double loss = 0, grad_norm = 0, lr = 0, seconds = 0;
  };
  nlohmann::json step_line(const StepInputs& in, const StepReport& report) const;
  // One line for the console log.
  std::string step_text(const nlohmann::json& line) const;

  nlohmann::json metadata() const;
  // Printed at start-up: the FLOPs conventions, the peak and where it came from.
  std::string assumptions() const;

 private:
  const RunConfig& config_;
  const BatchSource& data_;
  int world_size_;
  std::string backend_;
  nlohmann::json device_meta_;  // dist/device.hpp device_metadata
  ComputePeak peak_;
};

}  // namespace hetpar
