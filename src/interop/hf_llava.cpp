#include "interop/hf_llava.hpp"

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <set>

#include "interop/hf_model_config.hpp"
#include "io/safetensors.hpp"
#include "model/param_init.hpp"
#include "tp/tp_comm_ops.hpp"
#include "util/durable_file.hpp"

namespace hetpar {
namespace {

// The tower's final LayerNorm that transformers expects but LLaVA never
// applies to the features it uses: exported as the identity.
constexpr const char* kUnusedPostLayerNorm = "model.vision_tower.post_layernorm.";
constexpr const char* kPatchWeight = "encoder.patch_embedding.weight";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Shapes differ in one place: the patch embedding is a convolution there.
at::Tensor to_hf_shape(const std::string& name, const at::Tensor& full, const EncoderConfig& e) {
  if (name != kPatchWeight) return full;
  return full.reshape({e.hidden, e.channels, e.patch_size, e.patch_size});
}

at::Tensor gather_full(const MultimodalModel::NamedParameter& p, Group& tp) {
  const at::Tensor local = p.tensor.detach();
  if (p.shard_dim < 0 || tp.size() == 1) return local;
  return p.shard_dim == 0 ? tp.all_gather(local) : all_gather_last_dim(local, tp);
}

// transformers writes two key layouts: its model's own ("model.language_model.",
// what hetpar writes) and, from save_pretrained, the original one
// ("language_model.model.", "vision_tower." with or without "vision_model.").
// The first matching rule maps a key to the model's own layout.
constexpr std::pair<const char*, const char*> kToCanonical[] = {
    {"language_model.model.", "model.language_model."},
    {"language_model.lm_head.", "lm_head."},
    {"model.vision_tower.vision_model.", "model.vision_tower."},
    {"vision_tower.vision_model.", "model.vision_tower."},
    {"vision_tower.", "model.vision_tower."},
    {"multi_modal_projector.", "model.multi_modal_projector."}};

std::string canonical_hf_name(const std::string& key) {
  for (const auto& [from, to] : kToCanonical) {
    if (starts_with(key, from)) return to + key.substr(std::string(from).size());
  }
  return key;
}

// The save_pretrained spelling of a canonical name, for messages.
std::string legacy_hf_name(const std::string& name) {
  const std::pair<const char*, const char*> rules[] = {{"model.language_model.", "language_model.model."},
                                                       {"lm_head.", "language_model.lm_head."},
                                                       {"model.vision_tower.", "vision_tower."},
                                                       {"model.multi_modal_projector.", "multi_modal_projector."}};
  for (const auto& [from, to] : rules) {
    if (starts_with(name, from)) return to + name.substr(std::string(from).size());
  }
  return name;
}

struct CheckpointTensors {
  std::map<std::string, at::Tensor> by_name;     // canonical name -> tensor
  std::map<std::string, std::string> file_of;    // canonical name -> "file (key)"
};

CheckpointTensors read_checkpoint_tensors(const std::string& dir) {
  CheckpointTensors out;
  for (const std::string& file : hf_weight_files(dir)) {
    for (auto& [key, tensor] : read_safetensors(file)) {
      const std::string name = canonical_hf_name(key);
      const std::string where = file + " (" + key + ")";
      if (out.by_name.count(name)) {
        throw std::runtime_error(dir + ": " + out.file_of[name] + " and " + where + " are the same tensor " + name);
      }
      out.by_name.emplace(name, std::move(tensor));
      out.file_of.emplace(name, where);
    }
  }
  return out;
}

// What a LLaVA holds that its forward never reads: skipped, said in one line.
// Anything else left over is a model hetpar does not build: an error.
std::string unused_tensors_note(const CheckpointTensors& tensors, const std::set<std::string>& used,
                                const std::string& dir) {
  const std::string layers = "model.vision_tower.encoder.layers.";
  int64_t top_used = -1;
  for (const std::string& name : used) {
    if (starts_with(name, layers)) top_used = std::max<int64_t>(top_used, std::stoll(name.substr(layers.size())));
  }
  std::map<std::string, int> skipped;  // why -> tensors
  for (const auto& [name, tensor] : tensors.by_name) {
    if (used.count(name)) continue;
    if (starts_with(name, "model.vision_tower.head.")) {
      ++skipped["the tower's pooling head (vision_tower.head.*)"];
    } else if (starts_with(name, "model.vision_tower.post_layernorm.")) {
      ++skipped["the tower's final LayerNorm (the features are taken before it)"];
    } else if (starts_with(name, layers) && std::stoll(name.substr(layers.size())) > top_used) {
      ++skipped["tower layers after vision_feature_layer"];
    } else {
      throw std::runtime_error(tensors.file_of.at(name) + ": a tensor of no part of the model " + dir +
                               "/config.json describes (hetpar builds a SigLIP tower, a projector and a Llama)");
    }
  }
  std::string note;
  for (const auto& [why, count] : skipped) note += (note.empty() ? "" : "; ") + fmt::format("{} tensors of {}", count, why);
  return note.empty() ? note : "not used, as in transformers: " + note;
}

}  // namespace

std::string hf_name(const std::string& name) {
  const std::pair<const char*, const char*> prefixes[] = {
      {"encoder.layers.", "model.vision_tower.encoder.layers."},
      {"encoder.", "model.vision_tower.embeddings."},
      {"projector.", "model.multi_modal_projector."},
      {"llm.lm_head.", "lm_head."},
      {"llm.", "model.language_model."}};
  for (const auto& [from, to] : prefixes) {
    if (starts_with(name, from)) return to + name.substr(std::string(from).size());
  }
  throw std::logic_error("no transformers name for parameter " + name);
}

std::string llava_config_json(const RunConfig& c) {
  const nlohmann::ordered_json vision = {
      {"model_type", "siglip_vision_model"}, {"hidden_size", c.encoder.hidden},
      {"intermediate_size", c.encoder.mlp_hidden}, {"num_hidden_layers", c.encoder.layers},
      {"num_attention_heads", c.encoder.heads}, {"num_channels", c.encoder.channels},
      {"image_size", c.encoder.image_size}, {"patch_size", c.encoder.patch_size},
      {"hidden_act", c.encoder.hidden_act}, {"layer_norm_eps", c.encoder.norm_eps}, {"vision_use_head", false}};
  const nlohmann::ordered_json text = {
      {"model_type", "llama"}, {"vocab_size", c.llm.vocab_size}, {"hidden_size", c.llm.hidden},
      {"intermediate_size", c.llm.ffn_hidden}, {"num_hidden_layers", c.llm.layers},
      {"num_attention_heads", c.llm.heads}, {"num_key_value_heads", c.llm.kv_heads},
      {"head_dim", c.llm.hidden / c.llm.heads}, {"max_position_embeddings", c.llm.seq_len},
      {"rms_norm_eps", c.llm.norm_eps}, {"rope_theta", c.llm.rope_theta},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.llm.rope_theta}}},
      {"hidden_act", "silu"}, {"attention_bias", false},
      {"mlp_bias", false}, {"tie_word_embeddings", false}};
  const nlohmann::ordered_json config = {
      {"architectures", {"LlavaForConditionalGeneration"}}, {"model_type", "llava"},
      {"vision_config", vision}, {"text_config", text}, {"image_token_index", c.llm.image_token_id},
      {"image_seq_length", c.encoder.tokens_per_image()}, {"projector_hidden_act", c.encoder.projector_act},
      {"vision_feature_layer", -1},
      {"vision_feature_select_strategy", c.encoder.drop_first_token ? "default" : "full"},
      {"multimodal_projector_bias", true}, {"tie_word_embeddings", false}, {"dtype", "float32"}};
  return config.dump(2);
}

void save_hf(const RunConfig& config, const MultimodalModel& model, Group& encoder_tp, Group& llm_tp, bool write,
             const std::string& dir) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : model.named_parameters()) {
    const at::Tensor full = gather_full(p, p.on_encoder_side ? encoder_tp : llm_tp);
    tensors.emplace_back(hf_name(p.name), to_hf_shape(p.name, full, config.encoder).to(at::kFloat));
  }
  if (!write) return;
  tensors.emplace_back(std::string(kUnusedPostLayerNorm) + "weight", at::ones({config.encoder.hidden}));
  tensors.emplace_back(std::string(kUnusedPostLayerNorm) + "bias", at::zeros({config.encoder.hidden}));
  ensure_writable_dir(dir);
  write_file_atomic(dir + "/config.json", llava_config_json(config) + "\n");
  write_safetensors(dir + "/model.safetensors", tensors);
}

std::string load_hf(const MultimodalModel& model, Group& encoder_tp, Group& llm_tp, const std::string& dir) {
  const CheckpointTensors tensors = read_checkpoint_tensors(dir);
  std::set<std::string> used;
  at::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    const std::string name = hf_name(p.name);
    const auto it = tensors.by_name.find(name);
    if (it == tensors.by_name.end()) {
      throw std::runtime_error(dir + ": no tensor " + name + " (nor under the layout " + legacy_hf_name(name) + ")");
    }
    used.insert(name);
    const std::string file = tensors.file_of.at(name);
    Group& tp = p.on_encoder_side ? encoder_tp : llm_tp;
    at::Tensor full = it->second.to(at::kFloat);
    if (p.name == kPatchWeight) full = full.reshape({full.size(0), -1});
    at::Tensor mine = p.shard_dim < 0 ? full : shard(full, p.shard_dim, tp.rank(), tp.size());
    if (mine.sizes() != p.tensor.sizes()) {
      throw std::runtime_error(fmt::format("{}: {} has shape [{}], the run's config needs [{}] on this rank",
                                           file, name, fmt::join(it->second.sizes(), ","),
                                           fmt::join(p.tensor.sizes(), ",")));
    }
    p.tensor.copy_(mine);
  }
  return unused_tensors_note(tensors, used, dir);
}

}  // namespace hetpar
