#include "interop/hf_llava.hpp"

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "interop/hf_model_config.hpp"
#include "io/safetensors.hpp"
#include "model/param_init.hpp"

namespace hetpar {
namespace {

constexpr const char* kPatchWeight = "encoder.patch_embedding.weight";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

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

// Where each tensor of a checkpoint lies, from the files' headers alone: a
// rank reads only the tensors of its own stage.
struct CheckpointIndex {
  struct Place {
    std::string file, key;
    const SafetensorsEntry* entry;  // in headers
  };
  std::map<std::string, SafetensorsHeader> headers;  // file -> its header
  std::map<std::string, Place> by_name;              // canonical name -> where
  std::string where(const std::string& name) const {
    const Place& p = by_name.at(name);
    return p.file + " (" + p.key + ")";
  }
};

CheckpointIndex index_checkpoint(const std::string& dir) {
  CheckpointIndex out;
  for (const std::string& file : hf_weight_files(dir)) {
    const SafetensorsHeader& header = out.headers.emplace(file, read_safetensors_header(file)).first->second;
    for (const auto& [key, entry] : header.entries) {
      const std::string name = canonical_hf_name(key);
      if (out.by_name.count(name)) {
        throw std::runtime_error(dir + ": " + out.where(name) + " and " + file + " (" + key + ") are the same tensor " +
                                 name);
      }
      out.by_name.emplace(name, CheckpointIndex::Place{file, key, &entry});
    }
  }
  return out;
}

// What a LLaVA holds that its forward never reads: skipped, said in one line.
// Anything else left over is a model hetpar does not build: an error.
std::string unused_tensors_note(const CheckpointIndex& tensors, const std::set<std::string>& used,
                                const std::string& dir) {
  const std::string layers = "model.vision_tower.encoder.layers.";
  int64_t top_used = -1;
  for (const std::string& name : used) {
    if (starts_with(name, layers)) top_used = std::max<int64_t>(top_used, std::stoll(name.substr(layers.size())));
  }
  std::map<std::string, int> skipped;  // why -> tensors
  for (const auto& [name, place] : tensors.by_name) {
    if (used.count(name)) continue;
    if (starts_with(name, "model.vision_tower.head.")) {
      ++skipped["the tower's pooling head (vision_tower.head.*)"];
    } else if (starts_with(name, "model.vision_tower.post_layernorm.")) {
      ++skipped["the tower's final LayerNorm (the features are taken before it)"];
    } else if (starts_with(name, layers) && std::stoll(name.substr(layers.size())) > top_used) {
      ++skipped["tower layers after vision_feature_layer"];
    } else {
      throw std::runtime_error(tensors.where(name) + ": a tensor of no part of the model " + dir +
                               "/config.json describes (hetpar builds a SigLIP tower, a projector and a Llama)");
    }
  }
  std::string note;
  for (const auto& [why, count] : skipped) note += (note.empty() ? "" : "; ") + fmt::format("{} tensors of {}", count, why);
  return note.empty() ? note : "not used, as in transformers: " + note;
}

// Ends every rank with the problem that rank world.size() - `found` found
// (the lowest that found one), so whichever rank exits first says what is wrong.
[[noreturn]] void throw_first_problem(int found, const std::string& problem, Group& world, const at::Device& device) {
  constexpr int64_t kLength = 1024;
  at::Tensor text = at::zeros({kLength}, at::kByte);
  std::copy_n(problem.data(), std::min<int64_t>(problem.size(), kLength - 1), text.data_ptr<uint8_t>());
  text = text.to(device);
  world.broadcast(text, world.size() - found);
  text = text.cpu();
  throw std::runtime_error(reinterpret_cast<const char*>(text.data_ptr<uint8_t>()));
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

at::Tensor to_hf_shape(const std::string& name, const at::Tensor& full, const EncoderConfig& e) {
  if (name != kPatchWeight) return full;
  return full.reshape({e.hidden, e.channels, e.patch_size, e.patch_size});
}

std::string load_hf(const MultimodalModel& model, JobGroups& groups, Group& world, const std::string& dir) {
  using Placed = std::pair<const MultimodalModel::NamedParameter*, const CheckpointIndex::Place*>;
  const CheckpointIndex index = index_checkpoint(dir);
  const auto params = model.named_parameters();
  const auto tp_of = [&](const MultimodalModel::NamedParameter& p) -> Group& {
    return (p.on_encoder_side ? groups.encoder() : groups.llm()).get(GroupKind::kTp);
  };
  // This rank's parameters, each with where its tensor lies; the first one the
  // checkpoint lacks, or holds in another shape, is the problem.
  std::vector<Placed> placed;
  std::string problem;
  for (const auto& p : params) {
    const std::string name = hf_name(p.name);
    const auto it = index.by_name.find(name);
    if (it == index.by_name.end()) {
      problem = dir + ": no tensor " + name + " (nor under the layout " + legacy_hf_name(name) + ")";
      break;
    }
    const SafetensorsEntry& entry = *it->second.entry;
    const std::vector<int64_t>& stored = entry.shape;
    // Read as float32: integer weights (a .int() copy) would load truncated, without a word.
    if (!at::isFloatingType(entry.dtype)) {
      problem = fmt::format("{}: {} holds {}, not floating-point weights", index.where(name), name,
                            c10::toString(entry.dtype));
      break;
    }
    std::vector<int64_t> shape = stored;
    if (p.name == kPatchWeight) {
      // Exactly transformers' convolution weight: a channels-last or flat
      // tensor of the same size would load scrambled, and the loss be wrong.
      const std::vector<int64_t> needed = to_hf_shape(kPatchWeight, p.tensor, model.encoder->config()).sizes().vec();
      if (stored != needed) {
        problem = fmt::format("{}: {} has shape [{}], not transformers' [hidden, channels, patch, patch] = [{}]",
                              index.where(name), name, fmt::join(stored, ","), fmt::join(needed, ","));
        break;
      }
      shape = p.tensor.sizes().vec();
    }
    // Each TP rank holds 1/size of the shard dimension (-1: the whole tensor).
    const int parts = tp_of(p).size(), dim = p.shard_dim;
    const bool divides = dim < 0 || (dim < static_cast<int>(shape.size()) && shape[dim] % parts == 0);
    if (divides && dim >= 0) shape[dim] /= parts;
    if (!divides || at::IntArrayRef(shape) != p.tensor.sizes()) {
      problem = fmt::format("{}: {} has shape [{}], the run's config needs [{}] on this rank", index.where(name),
                            name, fmt::join(stored, ","), fmt::join(p.tensor.sizes(), ","));
      break;
    }
    placed.emplace_back(&p, &it->second);
  }
  // Every rank judges the whole checkpoint alike, in one all-reduce over the
  // job before anything is read: which tensors some rank uses (under pipeline
  // parallelism none uses all), and the lowest rank that found a problem.
  const int64_t count = static_cast<int64_t>(index.by_name.size());
  std::set<const CheckpointIndex::Place*> mine;
  for (const auto& [p, place] : placed) mine.insert(place);
  std::vector<int> marks;
  for (const auto& [name, place] : index.by_name) marks.push_back(static_cast<int>(mine.count(&place)));
  marks.push_back(problem.empty() ? 0 : world.size() - world.rank());
  at::Tensor all = at::tensor(marks, at::kInt).to(model.device());
  world.all_reduce(all, ReduceOp::kMax);
  all = all.cpu();
  std::copy_n(all.data_ptr<int>(), count + 1, marks.begin());
  if (const int found = marks[count]; found != 0) throw_first_problem(found, problem, world, model.device());
  std::set<std::string> used;
  int64_t i = 0;
  for (const auto& [name, place] : index.by_name) {
    if (marks[i++] != 0) used.insert(name);
  }
  const std::string note = unused_tensors_note(index, used, dir);

  // File by file, only this rank's tensors; each rank copies its TP shard.
  std::map<std::string, std::vector<Placed>> by_file;
  for (const Placed& pp : placed) by_file[pp.second->file].push_back(pp);
  at::NoGradGuard no_grad;
  for (const auto& [file, file_params] : by_file) {
    std::vector<std::string> keys;
    for (const auto& [p, place] : file_params) keys.push_back(place->key);
    const auto tensors = read_safetensors(file, index.headers.at(file), keys);
    for (const auto& [p, place] : file_params) {
      at::Tensor full = tensors.at(place->key).to(at::kFloat);
      // A NaN or infinite weight makes every loss NaN: named here, not left to the loss.
      if (!at::isfinite(full).all().item<bool>()) {
        problem = fmt::format("{}: {} holds a NaN or infinite value (as float32)", index.where(hf_name(p->name)),
                              hf_name(p->name));
        break;
      }
      if (p->name == kPatchWeight) full = full.reshape({full.size(0), -1});
      Group& tp = tp_of(*p);
      p->tensor.copy_(p->shard_dim < 0 ? full : shard(full, p->shard_dim, tp.rank(), tp.size()));
    }
    if (!problem.empty()) break;
  }
  // The values are judged alike: every rank ends with the message, not only the one that read them.
  at::Tensor found = at::tensor({problem.empty() ? 0 : world.size() - world.rank()}, at::kInt).to(model.device());
  world.all_reduce(found, ReduceOp::kMax);
  if (const int rank = found.cpu().item<int>(); rank != 0) throw_first_problem(rank, problem, world, model.device());
  return note;
}

}  // namespace hetpar
