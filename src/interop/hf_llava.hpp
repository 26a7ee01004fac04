// Hugging Face interop: a hetpar model as a directory that transformers'
// LlavaForConditionalGeneration loads (config.json + model.safetensors or its
// shards, a SigLIP vision tower and a Llama text model), and back. Writing is
// in interop/hf_export.hpp.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "dist/group.hpp"
#include "dist/module_groups.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

// The transformers name of a hetpar parameter ("llm.layers.0.mlp.up_proj.weight"
// -> "model.language_model.layers.0.mlp.up_proj.weight").
std::string hf_name(const std::string& hetpar_name);

// A full (TP-gathered) hetpar parameter in the shape transformers stores:
// they differ only for the patch embedding, a convolution there.
at::Tensor to_hf_shape(const std::string& hetpar_name, const at::Tensor& full, const EncoderConfig& encoder);

// config.json of the LLaVA model equivalent to `config`.
std::string llava_config_json(const RunConfig& config);

// Loads DIR's weights (model.safetensors or its shards, in either key layout
// transformers writes) into the model under any layout: each rank reads only
// the tensors of its own modules and stages and copies its TP shard of each.
// A collective over `world` (every rank calls it). Returns a one-line note of
// the tensors a LLaVA holds but never uses (the SigLIP pooling head, its final
// LayerNorm, tower layers after the feature layer), "" when none. Throws
// std::runtime_error naming a missing tensor, one no part of the model has a
// place for, one of integers, a shape that does not match the run's config
// (the patch embedding exactly transformers' [hidden, channels, patch,
// patch]), or a NaN or infinite value.
std::string load_hf(const MultimodalModel& model, JobGroups& groups, Group& world, const std::string& dir);

}  // namespace hetpar
