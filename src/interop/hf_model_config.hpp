// The model a transformers LLaVA directory describes, read from its
// config.json: the sizes and semantics hetpar's run file calls encoder.* and
// llm.*, each remembered with the config.json key it came from, so that a run
// file contradicting the checkpoint is an error naming both values. Torch-free.
//
// Supported: model_type "llava" with a "siglip_vision_model" tower and a
// "llama" text model, default RoPE, untied embeddings, a projector with biases
// and one vision_feature_layer. Anything else is refused, naming the key.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "config/run_schema.hpp"

namespace hetpar {

// One run-file key as config.json sets it.
struct HfSetting {
  std::string key;     // hetpar's, "llm.rope_theta"
  std::string hf_key;  // config.json's, "text_config.rope_parameters.rope_theta"
  SchemaValue value;
};

struct HfModelConfig {
  std::string file;                   // DIR/config.json
  std::vector<HfSetting> settings;    // encoder.* and llm.* keys, in schema order
  int64_t tower_layers = 0;           // vision_config.num_hidden_layers; encoder.layers are those used
  std::vector<std::string> notes;     // what is read differently from the file (one line each)
};

// Reads DIR/config.json. Throws ConfigError (file, key, reason) for a missing
// file, a missing size, or a setting hetpar does not model.
HfModelConfig read_hf_model_config(const std::string& dir);

// The safetensors files holding DIR's weights: model.safetensors, or the
// shards model.safetensors.index.json lists (each once, in order). Throws
// ConfigError when there is neither, or a listed shard is missing.
std::vector<std::string> hf_weight_files(const std::string& dir);

// The settings as TOML tables ([encoder], [llm]): the base of a run that has
// no run file of its own.
std::string hf_model_toml(const HfModelConfig& model);

// Throws ConfigError when CONFIG sets a model key otherwise than config.json:
// "encoder.hidden = 64 (run.toml) but vision_config.hidden_size = 32 (DIR/config.json)".
void check_matches_hf_model(const RunConfig& config, const HfModelConfig& model);

}  // namespace hetpar
