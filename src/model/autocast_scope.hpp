// bf16 autocast for the forward passes of a scope, on the CPU and CUDA:
// matmuls, linear layers and attention run in bf16 on fp32 weights; the
// backward runs outside (parameter gradients stay fp32), except a layer
// recomputed in it (model/recompute.hpp). Autocast's cast
// cache is cleared when the outermost scope ends, so that the optimizer's
// in-place updates are never hidden behind stale copies. Trainable weights
// are cast through tp/weight_cast.hpp instead, once a step.
#pragma once

#include <ATen/autocast_mode.h>

namespace hetpar {

class AutocastScope {
 public:
  explicit AutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    for (int i = 0; i < 2; ++i) {
      was_enabled_[i] = at::autocast::is_autocast_enabled(kDevices[i]);
      was_dtype_[i] = at::autocast::get_autocast_dtype(kDevices[i]);
      at::autocast::set_autocast_enabled(kDevices[i], true);
      at::autocast::set_autocast_dtype(kDevices[i], at::kBFloat16);
    }
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    for (int i = 0; i < 2; ++i) {
      at::autocast::set_autocast_enabled(kDevices[i], was_enabled_[i]);
      at::autocast::set_autocast_dtype(kDevices[i], was_dtype_[i]);
    }
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  static constexpr at::DeviceType kDevices[2] = {at::kCPU, at::kCUDA};
  bool enabled_;
  bool was_enabled_[2] = {false, false};
  at::ScalarType was_dtype_[2] = {at::kBFloat16, at::kBFloat16};
};

}  // namespace hetpar
