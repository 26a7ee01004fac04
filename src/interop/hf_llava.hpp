// Hugging Face interop: a hetpar model as a directory that transformers'
// LlavaForConditionalGeneration loads (config.json + model.safetensors, a
// SigLIP vision tower and a Llama text model), and back.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "dist/group.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

// The transformers name of a hetpar parameter ("llm.layers.0.mlp.up_proj.weight"
// -> "model.language_model.layers.0.mlp.up_proj.weight").
std::string hf_name(const std::string& hetpar_name);

// config.json of the LLaVA model equivalent to `config`.
std::string llava_config_json(const RunConfig& config);

// Gathers full weights over the TP groups (every rank of both groups must
// call) and, where `write` is true, writes DIR/config.json and
// DIR/model.safetensors in float32.
void save_hf(const RunConfig& config, const MultimodalModel& model, Group& encoder_tp, Group& llm_tp, bool write,
             const std::string& dir);

// Loads DIR's weights (model.safetensors or its shards, in either key layout
// transformers writes) into the model: each rank copies its shard of every
// full tensor. Returns a one-line note of the tensors a LLaVA holds but never
// uses (the SigLIP pooling head, its final LayerNorm, tower layers after the
// feature layer), "" when none. Throws std::runtime_error naming a missing
// tensor, one the model has no place for, or a shape that does not match the
// run's config.
std::string load_hf(const MultimodalModel& model, Group& encoder_tp, Group& llm_tp, const std::string& dir);

}  // namespace hetpar
