// Where a step's time goes on one rank: wall time per phase (encoder, boundary,
// LLM, gradient sync, optimizer, waiting for the other module), each phase
// also marked as an NVTX range so a GPU profiler shows the same names (the
// ranges are no-ops when no profiler is attached).
#pragma once

#include <array>
#include <chrono>
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
  };

  [[nodiscard]] Scope measure(Phase phase) { return Scope(*this, phase); }
  // The totals since the last take(), then zero.
  Seconds take();

 private:
  Seconds seconds_{};
};

}  // namespace hetpar
