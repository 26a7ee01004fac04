// Where a step's time goes on one rank: wall time per phase (encoder, boundary,
// LLM, gradient sync, optimizer, waiting for the other module), each phase
// also marked as an NVTX range so a GPU profiler shows the same names (the
// ranges are no-ops when no profiler is attached). On a GPU the host only
// queues work, so a phase is timed by CUDA events on the current stream,
// read by take() once the step's work is done: no host sync inside a step.
#pragma once

#include <c10/core/Device.h>

#include <array>
#include <chrono>
#include <memory>
#include <string_view>

namespace hetpar {

enum class Phase {
  kEncoderForward,
  kEncoderBackward,
  kBoundaryForward,
  kBoundaryBackward,
  kLlmForward,
  kLlmBackward,
  kGradSync,
  kOptimizer,
  kWait,  // blocked on the other module's rows or gradients
  kPipelineWait,  // blocked on the LLM's neighbouring pipeline stage: the bubble
};
inline constexpr int kPhaseCount = static_cast<int>(Phase::kPipelineWait) + 1;

// "encoder_forward", ...: the key used in steps.jsonl and results.
std::string_view phase_name(Phase phase);

class PhaseTimer {
 public:
  using Seconds = std::array<double, kPhaseCount>;

  explicit PhaseTimer(const c10::Device& device = c10::Device(c10::kCPU));
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  class Scope {  // times one phase from construction to destruction
   public:
    Scope(PhaseTimer& timer, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseTimer& timer_;
    Phase phase_;
    std::chrono::steady_clock::time_point start_;
    size_t start_event_ = 0;
  };

  [[nodiscard]] Scope measure(Phase phase) { return Scope(*this, phase); }
  // The totals since the last take(), then zero. On a GPU, call it after the
  // device has done the step's work (dist/device.hpp wait_for_device).
  Seconds take();

 private:
  struct DeviceEvents;  // the GPU's event pool, only where one is used
  Seconds seconds_{};
  std::unique_ptr<DeviceEvents> events_;
};

}  // namespace hetpar
