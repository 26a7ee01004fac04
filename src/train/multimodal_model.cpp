#include "train/multimodal_model.hpp"

#include <ATen/ATen.h>

#include <map>
#include <optional>

#include "tp/parallel_linear.hpp"
#include "model/autocast_scope.hpp"
#include "tp/vocab_parallel.hpp"

namespace hetpar {
namespace {

// The dimension along which a TP layer shards each of its parameters.
std::map<const at::TensorImpl*, int> shard_dims(torch::nn::Module& root) {
  std::map<const at::TensorImpl*, int> dims;
  for (const auto& m : root.modules()) {
    if (auto* col = dynamic_cast<ColumnParallelLinear*>(m.get())) {
      dims[col->weight.unsafeGetTensorImpl()] = 0;
      if (col->bias.defined()) dims[col->bias.unsafeGetTensorImpl()] = 0;
    } else if (auto* row = dynamic_cast<RowParallelLinear*>(m.get())) {
      dims[row->weight.unsafeGetTensorImpl()] = 1;
    } else if (auto* emb = dynamic_cast<VocabParallelEmbedding*>(m.get())) {
      dims[emb->weight.unsafeGetTensorImpl()] = 0;
    }
  }
  return dims;
}

MultimodalModel::ParameterSets trainable_sets(const std::vector<MultimodalModel::NamedParameter>& params,
                                              bool encoder_side) {
  MultimodalModel::ParameterSets sets;
  for (const auto& p : params) {
    if (p.on_encoder_side != encoder_side || !p.tensor.requires_grad()) continue;
    (p.shard_dim >= 0 ? sets.sharded : sets.replicated).push_back(p.tensor);
  }
  return sets;
}

}  // namespace

MultimodalModel::MultimodalModel(const RunConfig& c, Group* encoder_tp, Group* llm_tp, Group* llm_cp, int llm_stage,
                                 int encoder_stage)
    : llm_hidden_(c.llm.hidden), encoder_frozen_(c.encoder.frozen), bf16_(computes_in_bf16(c)),
      bf16_residual_(bf16_residual(c)) {
  if (encoder_tp) {
    const int stages = c.placement.encoder.pp;
    encoder = std::make_shared<VisionEncoder>(c.encoder, c.run.seed, *encoder_tp, encoder_stage, stages);
    if (encoder_stage == stages - 1) projector = make_projector(c.encoder, c.llm, c.run.seed, *encoder_tp);
    if (encoder_frozen_) {
      for (at::Tensor& p : encoder->parameters()) p.set_requires_grad(false);
    }
    encoder->set_recompute(recomputed_layers(c, Module::kEncoder, encoder->block_count()));
    encoder->set_residual_dtype(residual_dtype());
  }
  if (llm_tp) {
    llm = std::make_shared<LlamaModel>(c.llm, c.run.seed, *llm_tp, llm_cp, llm_stage, c.placement.llm.pp,
                                       c.placement.llm.sp ? TpSequence::kSplit : TpSequence::kWhole);
    llm->set_recompute(recomputed_layers(c, Module::kLlm, llm->block_count()));
    llm->set_residual_dtype(residual_dtype());
  }
}

void MultimodalModel::to(const at::Device& device) {
  for (torch::nn::Module* module : {static_cast<torch::nn::Module*>(encoder.get()),
                                    static_cast<torch::nn::Module*>(projector.get()),
                                    static_cast<torch::nn::Module*>(llm.get())}) {
    if (module != nullptr) module->to(device);
  }
  device_ = device;
}

at::Tensor MultimodalModel::encode(const at::Tensor& pixels) { return encoder_stage(pixels, at::Tensor()); }

at::Tensor MultimodalModel::encoder_stage(const at::Tensor& pixels, const at::Tensor& hidden) {
  const at::Tensor& input = encoder->first_stage() ? pixels : hidden;
  if (input.size(0) == 0 && encoder_last_stage()) {
    return at::zeros({0, llm_hidden_}, activation_options()).set_requires_grad(true);
  }
  const AutocastScope autocast(bf16_);
  at::Tensor x;
  {
    std::optional<at::NoGradGuard> no_grad;  // a frozen encoder records no graph
    if (encoder_frozen_) no_grad.emplace();
    x = encoder->blocks(encoder->first_stage() ? encoder->embed(input) : input);
  }
  if (!encoder_last_stage()) return x;
  return projector->forward(encoder->features(x)).reshape({-1, llm_hidden_}).to(activation_dtype());
}

at::Tensor MultimodalModel::llm_logits(const at::Tensor& ids, const at::Tensor& image_rows,
                                       const at::Tensor& image_mask) {
  const AutocastScope autocast(bf16_);
  return llm->forward(ids, image_rows, image_mask);
}

at::Tensor MultimodalModel::llm_stage(const at::Tensor& ids, const at::Tensor& image_rows,
                                      const at::Tensor& image_mask, const at::Tensor& hidden) {
  const AutocastScope autocast(bf16_);
  const at::Tensor x = llm->blocks(llm->first_stage() ? llm->embed(ids, image_rows, image_mask) : hidden);
  return llm->last_stage() ? llm->head(x) : x;
}

at::Tensor MultimodalModel::loss_sum(const MicroBatch& b) {
  const at::Tensor rows = encode(b.pixels);
  const at::Tensor logits = llm_logits(b.ids, rows, b.image_mask);
  return llm->loss_sum(logits, b.targets);
}

std::vector<at::Tensor> MultimodalModel::ParameterSets::all() const {
  std::vector<at::Tensor> out = sharded;
  out.insert(out.end(), replicated.begin(), replicated.end());
  return out;
}

std::vector<at::Tensor> MultimodalModel::trainable_parameters() const {
  std::vector<at::Tensor> out = encoder_side().all();
  const std::vector<at::Tensor> llm_params = llm_side().all();
  out.insert(out.end(), llm_params.begin(), llm_params.end());
  return out;
}

MultimodalModel::ParameterSets MultimodalModel::encoder_side() const { return trainable_sets(named_parameters(), true); }
MultimodalModel::ParameterSets MultimodalModel::llm_side() const { return trainable_sets(named_parameters(), false); }

std::vector<MultimodalModel::NamedParameter> MultimodalModel::named_parameters() const {
  std::vector<NamedParameter> out;
  const std::pair<const char*, torch::nn::Module*> modules[] = {
      {"encoder.", encoder.get()}, {"projector.", projector.get()}, {"llm.", llm.get()}};
  for (const auto& [prefix, module] : modules) {
    if (module == nullptr) continue;  // not on this rank (non-colocated)
    const auto dims = shard_dims(*module);
    for (const auto& item : module->named_parameters()) {
      const auto it = dims.find(item.value().unsafeGetTensorImpl());
      out.push_back({prefix + item.key(), item.value(), it == dims.end() ? -1 : it->second,
                     module != llm.get()});
    }
  }
  return out;
}

}  // namespace hetpar
