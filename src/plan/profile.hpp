// A calibration profile ("hetpar-profile/1", written by `hetpar calibrate`,
// plan/calibration.hpp) read for the step-time model: each primitive's time
// at a shape, from the measured entry nearest that shape and scaled to it.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <tuple>
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
  // Its backward through a linear layer's weight [n, k]: the input gradient
  // (m x k from m x n by n x k) and the weight's (n x k over the m rows), 4mnk
  // FLOPs at the backward rate measured nearest (m, n, k).
  double gemm_backward_seconds(double m, double n, double k) const;
  // Scaled dot-product attention of `batch_heads` (sequence, head) pairs of
  // `seq` tokens each: forward, or backward (its input and weight gradients).
  // From the entry nearest in (seq, head_dim), scaled by batch_heads, seq^2
  // and head_dim; `grouped` (query heads sharing key heads) takes the entries
  // measured so where the profile has any (a CPU takes another kernel for them).
  double attention_seconds(double batch_heads, double seq, double head_dim, bool causal, bool backward,
                           bool grouped = false) const;
  // A memory-bound op ("add", "gelu", "rms_norm", "layer_norm") moving `bytes`.
  double memory_seconds(const std::string& op, double bytes) const;
  // A collective ("all_reduce", "all_gather", "reduce_scatter",
  // "all_to_all_v", "send_recv") of `bytes` on `group_size` ranks: latency +
  // bytes / bandwidth from the nearest group size measured (where its fit
  // failed, the nearest measured size's time, scaled up beyond it); 0 on one
  // rank. Entries may carry a "scope" ("intra_node" or "inter_node"). A group
  // across nodes, `members_per_node` of it on each (0: the group is inside one
  // node), takes the inter-node entries where there are any, their bandwidth
  // (one network link a device) times the members a node has, but never
  // faster than the same group inside a node would be.
  double collective_seconds(const std::string& op, int group_size, double bytes, int members_per_node = 0) const;
  // What a collective of `group_size` ranks costs beyond collective_seconds
  // when `compute_seconds` of compute precede it rather than the
  // calibration's in-context compute: the ranks drift apart in proportion
  // to their compute and the collective waits for the last (a CPU
  // calibration's all-reduce measures the rate; 0 without it, or on one rank).
  double collective_skew_seconds(int group_size, double compute_seconds) const;

  // Whole layers measured on one rank (TP 1) by a CPU calibration: a
  // module's ("llm" or "encoder") layer at a shape, forward and backward.
  struct LayerTiming {
    std::string module;
    double sequences, seq, hidden, heads, kv_heads, mlp;
    double forward_seconds, backward_seconds;
  };
  const std::vector<LayerTiming>& layers() const { return layers_; }

  const nlohmann::json& measured() const { return measured_; }  // where and when
  // CPU cores the ranks share; 0 on a GPU profile (a device to each rank).
  int cores() const { return cores_; }
  // With more ranks than cores, the share of a core's time that goes to the
  // ranks' work rather than to switching between them (1: not measured).
  double shared_core_efficiency() const { return shared_core_efficiency_; }
  // Bytes of an activation value and of the collectives that move them (4
  // in fp32; a bf16 GPU profile says 2). Gradients are reduced in fp32 always.
  double element_bytes() const { return element_bytes_; }
  double peak_flops_per_second() const { return peak_flops_; }  // 0: not stated
  // Devices a node holds (consecutive ranks); 0: every rank on one node.
  int gpus_per_node() const { return gpus_per_node_; }
  // Memory a device offers (0: not stated, nothing is checked), whether all
  // ranks share it (the CPU's host memory), and what the runtime keeps of it per rank.
  double memory_bytes() const { return memory_bytes_; }
  bool memory_shared_by_all_ranks() const { return memory_shared_; }
  double reserved_bytes() const { return reserved_bytes_; }
  // Whether attention keeps its (heads x keys) probabilities for the backward
  // (an unfused kernel: the CPU's with grouped-query heads) or not (a fused one).
  bool attention_keeps_probabilities() const { return attention_keeps_probabilities_; }
  // Whether RMSNorm's backward runs as separate ops, each result held (the
  // CPU's), and whether the backend copies a reduce-scatter's input before
  // reducing it (Gloo's): both add to a backward's transient memory.
  bool norm_backward_unfused() const { return norm_backward_unfused_; }
  bool reduce_scatter_copies_input() const { return reduce_scatter_copies_input_; }
  // Whether the device's GEMM adds a bf16 product into the fp32 .grad itself
  // (tp/weight_grad.hpp): no bf16 weight gradient, and no pass adding it.
  bool gemm_adds_into_fp32() const { return gemm_adds_into_fp32_; }

 private:
  struct Gemm { double log_m, log_n, log_k, flops_per_second, backward_flops_per_second; };
  const Gemm& nearest_gemm(double m, double n, double k) const;
  struct Attention { double batch_heads, seq, head_dim; bool causal, grouped; double forward, backward; };
  struct MemoryBound { std::string op; double bytes, bytes_per_second; };
  // An alpha-beta fit, or where the fit failed (noise swamped the sizes) the measured points.
  struct Collective {
    std::string op;
    std::string scope;  // "", "intra_node" or "inter_node"
    int group_size;
    double latency, bytes_per_second;           // bytes_per_second 0: no fit
    std::vector<std::pair<double, double>> points;  // (bytes, seconds)
    double skew_per_compute_second = 0, in_context_compute_seconds = 0;  // all-reduce, CPU calibration
  };
  std::vector<Gemm> gemm_;
  std::vector<Attention> attention_;
  std::vector<MemoryBound> memory_;
  std::vector<LayerTiming> layers_;
  std::vector<Collective> collectives_;
  nlohmann::json measured_;
  // Lookups already made: a planner asks for the same shapes over and over.
  mutable std::map<std::tuple<double, double, double>, size_t> gemm_nearest_;  // index into gemm_
  mutable std::map<std::tuple<double, double, double, bool, bool, bool>, double> attention_seconds_;
  mutable std::map<std::tuple<std::string, int, double, int>, double> collective_seconds_;
  int cores_ = 1;
  double shared_core_efficiency_ = 1;
  double element_bytes_ = 4, peak_flops_ = 0;
  int gpus_per_node_ = 0;
  double memory_bytes_ = 0, reserved_bytes_ = 0;
  bool memory_shared_ = false, attention_keeps_probabilities_ = false;
  bool norm_backward_unfused_ = false, reduce_scatter_copies_input_ = false, gemm_adds_into_fp32_ = false;
};

}  // namespace hetpar
