#include "metrics/phase_timer.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>

#include <deque>
#include <vector>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define HETPAR_NVTX 1
#endif

namespace hetpar {

// Events recorded this step on the GPU's current stream, reused across steps
// (a deque: recording more must not move the events already recorded).
struct PhaseTimer::DeviceEvents {
  c10::DeviceIndex device;
  std::deque<at::cuda::CUDAEvent> pool;  // timing-enabled events
  size_t used = 0;
  struct Span {
    Phase phase;
    size_t start, end;
  };
  std::vector<Span> spans;

  size_t record() {
    if (used == pool.size()) pool.emplace_back(cudaEventDefault);
    pool[used].record(at::cuda::getCurrentCUDAStream(device));
    return used++;
  }
};

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

PhaseTimer::PhaseTimer(const c10::Device& device) {
  if (device.is_cuda()) events_ = std::make_unique<DeviceEvents>(DeviceEvents{device.index(), {}, 0, {}});
}

PhaseTimer::~PhaseTimer() = default;

PhaseTimer::Scope::Scope(PhaseTimer& timer, Phase phase)
    : timer_(timer), phase_(phase), start_(std::chrono::steady_clock::now()) {
#ifdef HETPAR_NVTX
  nvtxRangePushA(phase_name(phase).data());  // the names are NUL-terminated literals
#endif
  if (timer_.events_) start_event_ = timer_.events_->record();
}

PhaseTimer::Scope::~Scope() {
#ifdef HETPAR_NVTX
  nvtxRangePop();
#endif
  if (DeviceEvents* e = timer_.events_.get()) {
    e->spans.push_back({phase_, start_event_, e->record()});
    return;
  }
  timer_.seconds_[static_cast<int>(phase_)] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

PhaseTimer::Seconds PhaseTimer::take() {
  if (DeviceEvents* e = events_.get()) {
    for (const DeviceEvents::Span& s : e->spans) {
      seconds_[static_cast<int>(s.phase)] += e->pool[s.start].elapsed_time(e->pool[s.end]) / 1e3;  // ms
    }
    e->spans.clear();
    e->used = 0;
  }
  const Seconds out = seconds_;
  seconds_ = {};
  return out;
}

}  // namespace hetpar
