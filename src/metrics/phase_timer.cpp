#include "metrics/phase_timer.hpp"

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define HETPAR_NVTX 1
#endif

namespace hetpar {

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kEncoderForward: return "encoder_forward";
    case Phase::kEncoderBackward: return "encoder_backward";
    case Phase::kBoundaryForward: return "boundary_forward";
    case Phase::kBoundaryBackward: return "boundary_backward";
    case Phase::kLlmForward: return "llm_forward";
    case Phase::kLlmBackward: return "llm_backward";
    case Phase::kGradSync: return "grad_sync";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kWait: return "wait";
    case Phase::kPipelineWait: return "pipeline_wait";
  }
  return "unknown";
}

PhaseTimer::Scope::Scope(PhaseTimer& timer, Phase phase)
    : timer_(timer), phase_(phase), start_(std::chrono::steady_clock::now()) {
#ifdef HETPAR_NVTX
  nvtxRangePushA(phase_name(phase).data());  // the names are NUL-terminated literals
#endif
}

PhaseTimer::Scope::~Scope() {
#ifdef HETPAR_NVTX
  nvtxRangePop();
#endif
  timer_.seconds_[static_cast<int>(phase_)] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

PhaseTimer::Seconds PhaseTimer::take() {
  const Seconds out = seconds_;
  seconds_ = {};
  return out;
}

}  // namespace hetpar
