// Pieces every rank job (train, eval) sets up the same way.
#pragma once

#include <chrono>
#include <memory>

#include "config/run_config.hpp"
#include "dist/module_groups.hpp"
#include "dist/runtime.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

inline RuntimeOptions runtime_options(const RuntimeConfig& c, const at::Device& device) {
  RuntimeOptions options;
  options.backend = c.backend;
  options.device = device;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000));
  options.intra_op_threads = static_cast<int>(c.intra_op_threads);
  options.nccl_split = c.nccl_split;
  return options;
}

// This rank's part of the model on `device`: each module's pipeline stage
// (where this rank holds one) on its TP group, the LLM's on its CP group too.
inline std::unique_ptr<MultimodalModel> rank_model(const RunConfig& config, JobGroups& groups, const at::Device& device) {
  ModuleGroups& llm = groups.llm();
  ModuleGroups& encoder = groups.encoder();
  auto model = std::make_unique<MultimodalModel>(
      config, encoder.active() ? &encoder.get(GroupKind::kTp) : nullptr, llm.active() ? &llm.get(GroupKind::kTp) : nullptr,
      llm.active() ? &llm.get(GroupKind::kCp) : nullptr, llm.active() ? llm.coord().pp : 0,
      encoder.active() ? encoder.coord().pp : 0);
  model->to(device);
  return model;
}

}  // namespace hetpar
