#include "interop/hf_model_config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "config/config_error.hpp"

namespace hetpar {
namespace {

using nlohmann::json;

// Reads config.json's keys with the checks and the errors that name them.
class Reader {
 public:
  Reader(std::string file, const json& root) : file_(std::move(file)), root_(root) {}

  const json* find(const std::string& dotted) const {
    const json* node = &root_;
    size_t start = 0;
    while (true) {
      const size_t dot = dotted.find('.', start);
      const std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!node->is_object() || !node->contains(part) || (*node)[part].is_null()) return nullptr;
      node = &(*node)[part];
      if (dot == std::string::npos) return node;
      start = dot + 1;
    }
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const { throw ConfigError(file_, key, why); }

  int64_t size(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "missing: hetpar takes the model's shape from config.json");
    if (!v->is_number_integer() || v->get<int64_t>() < 1) fail(key, "must be a positive integer, got " + v->dump());
    return v->get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number_integer()) fail(key, "must be an integer, got " + v->dump());
    return v->get<int64_t>();
  }
  double number(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0) {
      fail(key, "must be a positive number, got " + v->dump());
    }
    return v->get<double>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  bool flag(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  void require(const std::string& key, const std::string& got, const std::vector<std::string>& supported) const {
    for (const std::string& s : supported) {
      if (got == s) return;
    }
    std::string listed;
    for (const std::string& s : supported) listed += (listed.empty() ? "" : ", ") + ("\"" + s + "\"");
    fail(key, "\"" + got + "\" is not supported (hetpar models " + listed + ")");
  }

 private:
  std::string file_;
  const json& root_;
};

// transformers' GELU names: "gelu" is the exact form; the tanh forms are one formula.
std::string gelu_kind(const Reader& r, const std::string& key, const std::string& fallback) {
  const std::string act = r.text(key, fallback);
  if (act == "gelu") return "gelu";
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return "gelu_pytorch_tanh";
  r.fail(key, "\"" + act + "\" is not supported (hetpar models \"gelu\", \"gelu_pytorch_tanh\", \"gelu_new\")");
}

double rope_theta(const Reader& r) {
  // transformers 5 writes rope_parameters; earlier versions rope_theta and rope_scaling.
  if (r.find("text_config.rope_parameters")) {
    r.require("text_config.rope_parameters.rope_type", r.text("text_config.rope_parameters.rope_type", "default"),
              {"default"});
    return r.number("text_config.rope_parameters.rope_theta", 10000.0);
  }
  if (r.find("text_config.rope_scaling")) {
    const std::string type = r.text("text_config.rope_scaling.rope_type", r.text("text_config.rope_scaling.type", ""));
    r.require("text_config.rope_scaling", type, {"default"});
  }
  return r.number("text_config.rope_theta", 10000.0);
}

json parse_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError(file, "(file)", "cannot read config.json (missing or unreadable)");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(file, "(file)", std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace

HfModelConfig read_hf_model_config(const std::string& dir) {
  HfModelConfig m;
  m.file = dir + "/config.json";
  const json root = parse_file(m.file);
  const Reader r(m.file, root);
  r.require("model_type", r.text("model_type", ""), {"llava"});
  r.require("vision_config.model_type", r.text("vision_config.model_type", ""), {"siglip_vision_model"});
  r.require("text_config.model_type", r.text("text_config.model_type", ""), {"llama"});
  r.require("text_config.hidden_act", r.text("text_config.hidden_act", "silu"), {"silu"});
  for (const char* key : {"text_config.attention_bias", "text_config.mlp_bias", "tie_word_embeddings",
                          "text_config.tie_word_embeddings"}) {
    if (r.flag(key, false)) r.fail(key, "true is not supported (hetpar's Llama has no biases and an untied head)");
  }
  if (!r.flag("multimodal_projector_bias", true)) r.fail("multimodal_projector_bias", "false is not supported");
  const json* feature = r.find("vision_feature_layer");
  if (feature && !feature->is_number_integer()) {
    r.fail("vision_feature_layer", "features from several layers are not supported, got " + feature->dump());
  }
  const std::string select = r.text("vision_feature_select_strategy", "default");
  r.require("vision_feature_select_strategy", select, {"default", "full"});

  auto set = [&](std::string key, std::string hf_key, SchemaValue value) {
    m.settings.push_back({std::move(key), std::move(hf_key), std::move(value)});
  };
  const std::string v = "vision_config.", t = "text_config.";
  set("encoder.image_size", v + "image_size", r.size(v + "image_size"));
  set("encoder.patch_size", v + "patch_size", r.size(v + "patch_size"));
  set("encoder.channels", v + "num_channels", r.integer(v + "num_channels", 3));
  set("encoder.hidden", v + "hidden_size", r.size(v + "hidden_size"));
  // hidden_states[k] is the output of the first k layers (k < 0 counts from the end).
  m.tower_layers = r.size(v + "num_hidden_layers");
  const int64_t k = r.integer("vision_feature_layer", -2);
  const int64_t used = k < 0 ? m.tower_layers + 1 + k : k;
  if (used < 1 || used > m.tower_layers) {
    r.fail("vision_feature_layer", std::to_string(k) + " selects no layer of a tower of " +
                                       std::to_string(m.tower_layers) + " (hetpar needs at least its first)");
  }
  if (used < m.tower_layers) {
    m.notes.push_back("vision_feature_layer = " + std::to_string(k) + ": the tower's top " +
                      std::to_string(m.tower_layers - used) + " of " + std::to_string(m.tower_layers) +
                      " layers feed nothing and are not built");
  }
  set("encoder.layers", "vision_feature_layer", used);
  set("encoder.heads", v + "num_attention_heads", r.size(v + "num_attention_heads"));
  set("encoder.mlp_hidden", v + "intermediate_size", r.size(v + "intermediate_size"));
  set("encoder.norm_eps", v + "layer_norm_eps", r.number(v + "layer_norm_eps", 1e-6));
  set("encoder.hidden_act", v + "hidden_act", gelu_kind(r, v + "hidden_act", "gelu_pytorch_tanh"));
  set("encoder.projector_act", "projector_hidden_act", gelu_kind(r, "projector_hidden_act", "gelu"));
  set("encoder.drop_first_token", "vision_feature_select_strategy", select == "default");

  const int64_t hidden = r.size(t + "hidden_size"), heads = r.size(t + "num_attention_heads");
  if (r.find(t + "head_dim") && r.size(t + "head_dim") * heads != hidden) {
    r.fail(t + "head_dim", "must be hidden_size / num_attention_heads = " + std::to_string(hidden / heads) +
                               " (hetpar derives it), got " + r.find(t + "head_dim")->dump());
  }
  set("llm.vocab_size", t + "vocab_size", r.size(t + "vocab_size"));
  set("llm.hidden", t + "hidden_size", hidden);
  set("llm.layers", t + "num_hidden_layers", r.size(t + "num_hidden_layers"));
  set("llm.heads", t + "num_attention_heads", heads);
  set("llm.kv_heads", t + "num_key_value_heads", r.find(t + "num_key_value_heads") ? r.size(t + "num_key_value_heads") : heads);
  set("llm.ffn_hidden", t + "intermediate_size", r.size(t + "intermediate_size"));
  set("llm.norm_eps", t + "rms_norm_eps", r.number(t + "rms_norm_eps", 1e-6));
  set("llm.rope_theta", r.find(t + "rope_parameters") ? t + "rope_parameters.rope_theta" : t + "rope_theta",
      rope_theta(r));
  const std::string token_key = r.find("image_token_index") ? "image_token_index" : "image_token_id";
  set("llm.image_token_id", token_key, r.integer(token_key, 32000));
  return m;
}

std::vector<std::string> hf_weight_files(const std::string& dir) {
  const std::string single = dir + "/model.safetensors", index = single + ".index.json";
  if (std::filesystem::is_regular_file(single)) return {single};
  if (!std::filesystem::is_regular_file(index)) {
    const bool pickled = std::filesystem::exists(dir + "/pytorch_model.bin");
    throw ConfigError(single, "(file)", pickled ? "missing: hetpar reads safetensors weights, not pytorch_model.bin"
                                                : "missing (and no model.safetensors.index.json of shards)");
  }
  const json root = parse_file(index);
  if (!root.contains("weight_map") || !root["weight_map"].is_object()) {
    throw ConfigError(index, "weight_map", "missing or not an object");
  }
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const auto& [tensor, shard] : root["weight_map"].items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos) {
      throw ConfigError(index, "weight_map." + tensor, "must name a file in the directory, got " + shard.dump());
    }
    const std::string file = dir + "/" + shard.get<std::string>();
    if (!seen.insert(file).second) continue;
    if (!std::filesystem::is_regular_file(file)) throw ConfigError(index, "weight_map." + tensor, "no such file " + file);
    files.push_back(file);
  }
  return files;
}

std::string hf_model_toml(const HfModelConfig& model) {
  std::string out, section;
  for (const HfSetting& s : model.settings) {
    const size_t dot = s.key.rfind('.');
    if (s.key.substr(0, dot) != section) {
      section = s.key.substr(0, dot);
      out += (out.empty() ? "[" : "\n[") + section + "]\n";
    }
    out += s.key.substr(dot + 1) + " = " + toml_literal(s.value) + "\n";
  }
  return out;
}

void check_matches_hf_model(const RunConfig& config, const HfModelConfig& model) {
  std::map<std::string, const SchemaKey*> schema;
  for (const SchemaKey& key : run_schema()) schema[key.key] = &key;
  for (const HfSetting& s : model.settings) {
    const SchemaValue ours = schema.at(s.key)->get(config);
    if (ours == s.value) continue;
    throw ConfigError(config.source_file, s.key,
                      toml_literal(ours) + " here, but " + s.hf_key + " = " + toml_literal(s.value) + " in " +
                          model.file + ": the run must describe the checkpoint's model (leave the key out "
                          "or give the checkpoint's value)");
  }
}

}  // namespace hetpar
