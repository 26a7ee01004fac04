// An op-level profile of one training step (`runtime.profile_step = N`):
// ATen's profiler records every operator the rank runs during step N; the
// rank writes the trace (OUT/profile_rank<R>.json, for a trace viewer) and a
// table of operators by self time (OUT/profile_rank<R>.txt), where the time
// of a step goes and what bounds it; on a GPU also the kernels by GPU time.
#pragma once

#include <memory>
#include <string>

namespace hetpar {

class OpProfile {
 public:
  // Starts recording on this thread: the host's operators, and with
  // `gpu_kernels` (a CUDA run) every kernel the GPU ran, by its own time.
  explicit OpProfile(bool gpu_kernels = false);
  ~OpProfile();  // stops, if finish() was not called
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Stops recording and writes `path_prefix`.json and .txt; returns the
  // table's first `top` rows.
  std::string finish(const std::string& path_prefix, int top = 15);

 private:
  bool active_ = false;
  bool gpu_kernels_ = false;
};

}  // namespace hetpar
