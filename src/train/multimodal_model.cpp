#include "train/multimodal_model.hpp"

#include <ATen/ATen.h>

#include <optional>

#include "tp/parallel_linear.hpp"
#include "tp/vocab_parallel.hpp"

namespace hetpar {
namespace {

// The parameters a TP layer shards; everything else in a module is replicated.
MultimodalModel::ParameterSets split_by_sharding(const std::vector<torch::nn::Module*>& modules) {
  MultimodalModel::ParameterSets sets;
  std::vector<const at::TensorImpl*> sharded;
  for (torch::nn::Module* root : modules) {
    for (const auto& m : root->modules()) {
      if (auto* col = dynamic_cast<ColumnParallelLinear*>(m.get())) {
        sharded.push_back(col->weight.unsafeGetTensorImpl());
        if (col->bias.defined()) sharded.push_back(col->bias.unsafeGetTensorImpl());
      } else if (auto* row = dynamic_cast<RowParallelLinear*>(m.get())) {
        sharded.push_back(row->weight.unsafeGetTensorImpl());
      } else if (auto* emb = dynamic_cast<VocabParallelEmbedding*>(m.get())) {
        sharded.push_back(emb->weight.unsafeGetTensorImpl());
      }
    }
  }
  for (torch::nn::Module* root : modules) {
    for (const at::Tensor& p : root->parameters()) {
      if (!p.requires_grad()) continue;
      const bool is_sharded = std::find(sharded.begin(), sharded.end(), p.unsafeGetTensorImpl()) != sharded.end();
      (is_sharded ? sets.sharded : sets.replicated).push_back(p);
    }
  }
  return sets;
}

}  // namespace

MultimodalModel::MultimodalModel(const RunConfig& c, Group& encoder_tp, Group& llm_tp)
    : encoder(std::make_shared<VisionEncoder>(c.encoder, c.run.seed, encoder_tp)),
      projector(make_projector(c.encoder, c.llm, c.run.seed, encoder_tp)),
      llm(std::make_shared<LlamaModel>(c.llm, c.run.seed, llm_tp)),
      encoder_frozen_(c.encoder.frozen) {
  if (encoder_frozen_) {
    for (at::Tensor& p : encoder->parameters()) p.set_requires_grad(false);
  }
}

at::Tensor MultimodalModel::loss_sum(const MicroBatch& b) {
  at::Tensor rows;
  if (b.images > 0) {
    at::Tensor features;
    {
      std::optional<at::NoGradGuard> no_grad;  // a frozen encoder records no graph
      if (encoder_frozen_) no_grad.emplace();
      features = encoder->forward(b.pixels);
    }
    rows = projector->forward(features).reshape({-1, llm->hidden()});
  }
  const at::Tensor logits = llm->forward(b.ids, rows, b.image_mask);
  return llm->loss_sum(logits, b.targets);
}

std::vector<at::Tensor> MultimodalModel::trainable_parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& sets : {encoder_side(), llm_side()}) {
    out.insert(out.end(), sets.sharded.begin(), sets.sharded.end());
    out.insert(out.end(), sets.replicated.begin(), sets.replicated.end());
  }
  return out;
}

MultimodalModel::ParameterSets MultimodalModel::encoder_side() const {
  return split_by_sharding({encoder.get(), projector.get()});
}

MultimodalModel::ParameterSets MultimodalModel::llm_side() const { return split_by_sharding({llm.get()}); }

}  // namespace hetpar
