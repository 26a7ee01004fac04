// What the step-time model's and the planner's tests share: a hand-made
// calibration profile, and the tiny model set up for planning.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {

// The settings every planning test starts from: 8 samples a step, one a
// micro-batch (so DP up to 8), 4 LLM layers (so PP up to 4).
inline const std::vector<std::string> kPlanningSets = {"data.global_batch_size=8", "data.micro_batch_size=1",
                                                       "llm.layers=4"};

// workloads/tiny.toml with kPlanningSets, then `sets`.
inline RunConfig planning_run(const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = kPlanningSets;
  all.insert(all.end(), sets.begin(), sets.end());
  return load_run_config(source_tree_path("/workloads/tiny.toml"), all);
}

// Matmuls run at `rate` FLOP/s whatever their shape; attention, memory
// traffic and collectives cost next to nothing; `cores` shared by the ranks.
inline nlohmann::json flat_profile(double rate, int cores) {
  using nlohmann::json;
  json p = {{"format", "hetpar-profile/1"}, {"measured", {{"cores", cores}}}};
  p["gemm"] = {{{"m", 64}, {"n", 64}, {"k", 64}, {"flops_per_second", rate}}};
  p["attention"] = {{{"batch", 1}, {"heads", 4}, {"seq", 128}, {"head_dim", 16}, {"causal", true},
                     {"forward_seconds", 1e-12}, {"backward_seconds", 1e-12}}};
  p["memory_bound"] = json::array();
  for (const char* op : {"add", "gelu", "rms_norm", "layer_norm"}) {
    p["memory_bound"].push_back({{"op", op}, {"bytes", 1e6}, {"bytes_per_second", 1e18}});
  }
  p["collectives"] = json::array();
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all_v", "send_recv"}) {
    p["collectives"].push_back({{"op", op}, {"group_size", 2}, {"latency_seconds", 0.0}, {"bytes_per_second", 1e18}});
  }
  return p;
}

}  // namespace hetpar
