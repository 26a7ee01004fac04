// A calibration profile ("hetpar-profile/1", written by `hetpar calibrate`,
// plan/calibration.hpp) read for the step-time model: each primitive's time
// at a shape, from the measured entry nearest that shape and scaled to it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace hetpar {

class Profile {
 public:
  // Throws std::runtime_error naming `origin` and what is missing or malformed.
  static Profile from_json(const nlohmann::json& profile, const std::string& origin);
  static Profile load(const std::string& path);

  // C[m, n] = A[m, k] B[k, n]: 2mnk FLOPs at the rate measured nearest (m, n, k) (log scale).
  double gemm_seconds(double m, double n, double k) const;
  // Scaled dot-product attention of `batch_heads` (sequence, head) pairs of
  // `seq` tokens each: forward, or backward (its input and weight gradients).
  // From the entry nearest in (seq, head_dim), scaled by batch_heads, seq^2 and head_dim.
  double attention_seconds(double batch_heads, double seq, double head_dim, bool causal, bool backward) const;
  // A memory-bound op ("add", "gelu", "rms_norm", "layer_norm") moving `bytes`.
  double memory_seconds(const std::string& op, double bytes) const;
  // A collective ("all_reduce", "all_gather", "reduce_scatter",
  // "all_to_all_v", "send_recv") of `bytes` on `group_size` ranks: latency +
  // bytes / bandwidth from the nearest group size measured (where its fit
  // failed, the nearest measured size's time, scaled up beyond it); 0 on one rank.
  double collective_seconds(const std::string& op, int group_size, double bytes) const;

  const nlohmann::json& measured() const { return measured_; }  // where and when
  int cores() const { return cores_; }

 private:
  struct Gemm { double m, n, k, flops_per_second; };
  struct Attention { double batch_heads, seq, head_dim; bool causal; double forward, backward; };
  struct MemoryBound { std::string op; double bytes, bytes_per_second; };
  // An alpha-beta fit, or where the fit failed (noise swamped the sizes) the measured points.
  struct Collective {
    std::string op;
    int group_size;
    double latency, bytes_per_second;           // bytes_per_second 0: no fit
    std::vector<std::pair<double, double>> points;  // (bytes, seconds)
  };
  std::vector<Gemm> gemm_;
  std::vector<Attention> attention_;
  std::vector<MemoryBound> memory_;
  std::vector<Collective> collectives_;
  nlohmann::json measured_;
  int cores_ = 1;
};

}  // namespace hetpar
