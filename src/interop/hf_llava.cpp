#include "interop/hf_llava.hpp"

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>


#include "data/synthetic_data.hpp"
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
      {"hidden_act", "gelu_pytorch_tanh"}, {"layer_norm_eps", 1e-6}, {"vision_use_head", false}};
  const nlohmann::ordered_json text = {
      {"model_type", "llama"}, {"vocab_size", c.llm.vocab_size}, {"hidden_size", c.llm.hidden},
      {"intermediate_size", c.llm.ffn_hidden}, {"num_hidden_layers", c.llm.layers},
      {"num_attention_heads", c.llm.heads}, {"num_key_value_heads", c.llm.kv_heads},
      {"head_dim", c.llm.hidden / c.llm.heads}, {"max_position_embeddings", c.llm.seq_len},
      {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"attention_bias", false},
      {"mlp_bias", false}, {"tie_word_embeddings", false}};
  const nlohmann::ordered_json config = {
      {"architectures", {"LlavaForConditionalGeneration"}}, {"model_type", "llava"},
      {"vision_config", vision}, {"text_config", text}, {"image_token_index", kImageToken},
      {"image_seq_length", c.encoder.tokens_per_image()}, {"projector_hidden_act", "gelu_pytorch_tanh"},
      {"vision_feature_layer", -1}, {"vision_feature_select_strategy", "full"},
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

void load_hf(const MultimodalModel& model, Group& encoder_tp, Group& llm_tp, const std::string& dir) {
  const std::string file = dir + "/model.safetensors";
  const std::map<std::string, at::Tensor> tensors = read_safetensors(file);
  at::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    const std::string name = hf_name(p.name);
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error(file + ": no tensor " + name);
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
}

}  // namespace hetpar
