// config.json of a transformers LLaVA -> hetpar's model keys: both spellings
// transformers has used (rope_theta / rope_parameters, image_token_index /
// image_token_id), transformers' defaults for absent semantics, the feature
// layer, refusals by key, agreement with a run file, sharded weight files.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/config_error.hpp"
#include "interop/hf_model_config.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ModelDir {
 public:
  ModelDir() {
    std::string pattern = (fs::temp_directory_path() / "hetpar_hfcfg_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ModelDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  fs::path path_;
};

// The sizes only, in the older spelling: everything else is transformers' default.
json minimal_config() {
  return {{"model_type", "llava"},
          {"vision_config",
           {{"model_type", "siglip_vision_model"}, {"hidden_size", 32}, {"intermediate_size", 64},
            {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"image_size", 32}, {"patch_size", 8}}},
          {"text_config",
           {{"model_type", "llama"}, {"vocab_size", 300}, {"hidden_size", 64}, {"intermediate_size", 128},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}}}};
}

SchemaValue value_of(const HfModelConfig& m, const std::string& key) {
  for (const HfSetting& s : m.settings) {
    if (s.key == key) return s.value;
  }
  throw std::runtime_error("no setting " + key);
}

std::string refusal(const json& config) {
  ModelDir dir;
  dir.write("config.json", config.dump());
  try {
    read_hf_model_config(dir.str());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(HfModelConfig, AbsentSemanticsTakeTransformersDefaults) {
  ModelDir dir;
  dir.write("config.json", minimal_config().dump());
  const HfModelConfig m = read_hf_model_config(dir.str());
  EXPECT_EQ(value_of(m, "llm.kv_heads"), SchemaValue(int64_t{4}));  // = heads
  EXPECT_EQ(value_of(m, "llm.rope_theta"), SchemaValue(10000.0));
  EXPECT_EQ(value_of(m, "llm.norm_eps"), SchemaValue(1e-6));
  EXPECT_EQ(value_of(m, "llm.image_token_id"), SchemaValue(int64_t{32000}));
  EXPECT_EQ(value_of(m, "encoder.projector_act"), SchemaValue(std::string("gelu")));
  EXPECT_EQ(value_of(m, "encoder.hidden_act"), SchemaValue(std::string("gelu_pytorch_tanh")));
  // vision_feature_layer -2 and strategy "default": two of three layers, first token dropped.
  EXPECT_EQ(value_of(m, "encoder.layers"), SchemaValue(int64_t{2}));
  EXPECT_EQ(value_of(m, "encoder.drop_first_token"), SchemaValue(true));
  EXPECT_EQ(m.tower_layers, 3);
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("top 1 of 3 layers"), std::string::npos) << m.notes[0];
}

TEST(HfModelConfig, BothSpellingsOfRopeAndImageToken) {
  json older = minimal_config();
  older["text_config"]["rope_theta"] = 5000.0;
  older["image_token_index"] = 7;
  json newer = minimal_config();
  newer["text_config"]["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000.0}};
  newer["image_token_id"] = 7;
  for (const json& config : {older, newer}) {
    ModelDir dir;
    dir.write("config.json", config.dump());
    const HfModelConfig m = read_hf_model_config(dir.str());
    EXPECT_EQ(value_of(m, "llm.rope_theta"), SchemaValue(5000.0));
    EXPECT_EQ(value_of(m, "llm.image_token_id"), SchemaValue(int64_t{7}));
  }
}

TEST(HfModelConfig, PositiveFeatureLayerCountsFromTheBottom) {
  json config = minimal_config();
  config["vision_feature_layer"] = 1;
  config["vision_feature_select_strategy"] = "full";
  ModelDir dir;
  dir.write("config.json", config.dump());
  const HfModelConfig m = read_hf_model_config(dir.str());
  EXPECT_EQ(value_of(m, "encoder.layers"), SchemaValue(int64_t{1}));
  EXPECT_EQ(value_of(m, "encoder.drop_first_token"), SchemaValue(false));
}

TEST(HfModelConfig, WhatHetparDoesNotModelIsRefusedByKey) {
  auto with = [](const std::string& pointer, const json& value) {
    json config = minimal_config();
    config[json::json_pointer(pointer)] = value;
    return config;
  };
  const std::vector<std::pair<json, std::string>> cases = {
      {with("/text_config/rope_scaling", {{"rope_type", "yarn"}}), "text_config.rope_scaling: \"yarn\" is not supported"},
      {with("/text_config/head_dim", 32), "text_config.head_dim: must be hidden_size / num_attention_heads = 16"},
      {with("/text_config/attention_bias", true), "text_config.attention_bias"},
      {with("/tie_word_embeddings", true), "tie_word_embeddings"},
      {with("/vision_feature_layer", -4), "vision_feature_layer: -4 selects no layer of a tower of 3"},
      {with("/vision_feature_select_strategy", "cls"), "vision_feature_select_strategy: \"cls\" is not supported"},
      {with("/text_config/hidden_size", "64"), "text_config.hidden_size: must be a positive integer"},
      {with("/model_type", "qwen2_vl"), "model_type: \"qwen2_vl\" is not supported"},
  };
  for (const auto& [config, message] : cases) {
    const std::string what = refusal(config);
    EXPECT_NE(what.find(message), std::string::npos) << "expected \"" << message << "\" in: " << what;
  }
  ModelDir empty;
  try {
    read_hf_model_config(empty.str());
    ADD_FAILURE() << "a directory without config.json was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(empty.str() + "/config.json"), std::string::npos) << e.what();
  }
}

TEST(HfModelConfig, ARunThatContradictsTheCheckpointNamesBothValues) {
  ModelDir dir;
  json config_json = minimal_config();
  config_json["image_token_index"] = 7;  // the default, 32000, is outside this vocabulary
  dir.write("config.json", config_json.dump());
  const HfModelConfig m = read_hf_model_config(dir.str());
  RunConfig config = load_run_config_over(hf_model_toml(m), m.file, "", {});
  EXPECT_NO_THROW(check_matches_hf_model(config, m));
  EXPECT_EQ(config.encoder.layers, 2);
  EXPECT_EQ(config.encoder.tokens_per_image(), 15);
  config.source_file = "run.toml";
  config.llm.rope_theta = 500000.0;
  try {
    check_matches_hf_model(config, m);
    ADD_FAILURE() << "a contradicting run was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "run.toml: llm.rope_theta: 5e+05 here, but text_config.rope_theta = 10000.0 in " +
                                         m.file + ": the run must describe the checkpoint's model (leave the key out "
                                                  "or give the checkpoint's value)");
  }
}

// A run file over the checkpoint: the model keys it leaves out come from
// config.json, one it sets otherwise is refused.
TEST(HfModelConfig, ARunFileOverTheCheckpointTakesTheRest) {
  ModelDir dir;
  json config_json = minimal_config();
  config_json["image_token_index"] = 7;
  dir.write("config.json", config_json.dump());
  dir.write("run.toml", "[run]\nsteps = 3\n[llm]\nseq_len = 64\nhidden = 64\n");
  const HfModelConfig m = read_hf_model_config(dir.str());
  const RunConfig config = load_run_config_over(hf_model_toml(m), m.file, dir.str() + "/run.toml", {});
  EXPECT_NO_THROW(check_matches_hf_model(config, m));
  EXPECT_EQ(config.run.steps, 3);
  EXPECT_EQ(config.llm.seq_len, 64);
  EXPECT_EQ(config.llm.vocab_size, 300);
  EXPECT_EQ(config.llm.image_token_id, 7);
  EXPECT_EQ(config.encoder.layers, 2);
  EXPECT_EQ(config.source_file, dir.str() + "/run.toml");
  const RunConfig changed = load_run_config_over(hf_model_toml(m), m.file, dir.str() + "/run.toml", {"llm.kv_heads=2"});
  EXPECT_THROW(check_matches_hf_model(changed, m), ConfigError);
}

TEST(HfModelConfig, WeightFilesSingleOrSharded) {
  ModelDir dir;
  EXPECT_THROW(hf_weight_files(dir.str()), ConfigError);
  dir.write("model-1.safetensors", "x");
  dir.write("model-2.safetensors", "x");
  dir.write("model.safetensors.index.json",
            json{{"weight_map", {{"a", "model-1.safetensors"}, {"b", "model-2.safetensors"}, {"c", "model-1.safetensors"}}}}
                .dump());
  EXPECT_EQ(hf_weight_files(dir.str()),
            (std::vector<std::string>{dir.str() + "/model-1.safetensors", dir.str() + "/model-2.safetensors"}));
  dir.write("model.safetensors.index.json", json{{"weight_map", {{"a", "../elsewhere.safetensors"}}}}.dump());
  EXPECT_THROW(hf_weight_files(dir.str()), ConfigError);
  dir.write("model.safetensors.index.json", json{{"weight_map", {{"a", "model-3.safetensors"}}}}.dump());
  EXPECT_THROW(hf_weight_files(dir.str()), ConfigError);
  dir.write("model.safetensors", "x");
  EXPECT_EQ(hf_weight_files(dir.str()), std::vector<std::string>{dir.str() + "/model.safetensors"});
}

}  // namespace
}  // namespace hetpar
