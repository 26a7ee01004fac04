#include "config/run_schema.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "util/plain_name.hpp"

namespace hetpar {
namespace {

// ---- constraints --------------------------------------------------------------

Constraint any_value() {
  return {"", [](const SchemaValue&) { return std::string(); }};
}

Constraint at_least(int64_t min) {
  return {">= " + std::to_string(min), [min](const SchemaValue& value) {
            const int64_t got = std::get<int64_t>(value);
            return got >= min
                       ? std::string()
                       : "must be >= " + std::to_string(min) + ", got " + std::to_string(got);
          }};
}

Constraint positive_finite() {
  return {"> 0", [](const SchemaValue& value) {
            const double got = std::get<double>(value);
            return std::isfinite(got) && got > 0
                       ? std::string()
                       : "must be a finite number > 0, got " + toml_literal(value);
          }};
}

// A size in MiB that fits a byte count: up to 1 TiB.
Constraint mib_size() {
  return {"in (0, 1048576]", [](const SchemaValue& value) {
            const double got = std::get<double>(value);
            return got > 0 && got <= 1048576.0 ? std::string()
                                               : "must be a size in MiB in (0, 1048576], got " + toml_literal(value);
          }};
}

Constraint non_negative_finite() {
  return {">= 0", [](const SchemaValue& value) {
            const double got = std::get<double>(value);
            return std::isfinite(got) && got >= 0
                       ? std::string()
                       : "must be a finite number >= 0, got " + toml_literal(value);
          }};
}

Constraint unit_interval() {
  return {"in [0, 1)", [](const SchemaValue& value) {
            const double got = std::get<double>(value);
            return got >= 0 && got < 1 ? std::string() : "must be in [0, 1), got " + toml_literal(value);
          }};
}

// One path component: the default output directory is results/runs/<run.name>.
Constraint plain_name() {
  return {"a plain name", [](const SchemaValue& value) { return plain_name_problem(std::get<std::string>(value)); }};
}

Constraint one_of(std::vector<std::string> choices) {
  std::string listed;
  for (const std::string& choice : choices) listed += (listed.empty() ? "" : ", ") + choice;
  return {"in {" + listed + "}", [choices, listed](const SchemaValue& value) {
            const bool ok = std::find(choices.begin(), choices.end(),
                                      std::get<std::string>(value)) != choices.end();
            return ok ? std::string() : "must be one of " + listed + ", got " + toml_literal(value);
          }};
}

Constraint placement_names() {
  std::vector<std::string> names;
  for (Placement p : {Placement::Colocated, Placement::NonColocated, Placement::Uniform}) {
    names.push_back(to_string(p));
  }
  return one_of(std::move(names));
}

// ---- binding a dotted key to a RunConfig field ----------------------------------

// Schema values are int64/double/bool/string; fields may be narrower (int) or
// an enum spelled as a string (Placement).
template <typename Field>
constexpr ValueKind kind_of() {
  if constexpr (std::is_same_v<Field, bool>) {
    return ValueKind::Boolean;
  } else if constexpr (std::is_integral_v<Field>) {
    return ValueKind::Integer;
  } else if constexpr (std::is_floating_point_v<Field>) {
    return ValueKind::Float;
  } else {
    return ValueKind::String;
  }
}

template <typename Field>
SchemaValue to_schema_value(const Field& field) {
  if constexpr (std::is_same_v<Field, Placement>) {
    return to_string(field);
  } else if constexpr (kind_of<Field>() == ValueKind::Integer) {
    return static_cast<int64_t>(field);
  } else {
    return field;
  }
}

template <typename Field>
void from_schema_value(const SchemaValue& value, Field& field) {
  if constexpr (std::is_same_v<Field, Placement>) {
    parse_placement(std::get<std::string>(value), field);  // the value passed one_of already
  } else if constexpr (kind_of<Field>() == ValueKind::Integer) {
    field = static_cast<Field>(std::get<int64_t>(value));  // range-checked against max_integer
  } else {
    field = std::get<Field>(value);
  }
}

// The member reached from OBJECT through the member pointers PATH.
template <auto First, auto... Rest, typename Object>
auto& field_at(Object& object) {
  if constexpr (sizeof...(Rest) == 0) {
    return object.*First;
  } else {
    return field_at<Rest...>(object.*First);
  }
}

// The keys of one section, e.g. Section<&RunConfig::llm>{"llm"}; deeper
// sections name each member on the way: Section<&RunConfig::layout, &LayoutConfig::llm>.
template <auto... SectionPath>
struct Section {
  std::string name;

  // The default is read from a default-constructed RunConfig, so the structs'
  // initialisers stay the one place defaults are written.
  template <auto Member>
  SchemaKey key(const std::string& key_name, Constraint allowed, std::string meaning,
                std::string default_words = "") const {
    using Field =
        std::remove_cvref_t<decltype(field_at<SectionPath..., Member>(std::declval<RunConfig&>()))>;
    SchemaKey spec{
        name + "." + key_name,
        kind_of<Field>(),
        0,
        std::move(allowed),
        std::move(meaning),
        std::move(default_words),
        [](const RunConfig& c) { return to_schema_value(field_at<SectionPath..., Member>(c)); },
        [](RunConfig& c, const SchemaValue& v) {
          from_schema_value(v, field_at<SectionPath..., Member>(c));
        }};
    if constexpr (kind_of<Field>() == ValueKind::Integer) {
      spec.max_integer = static_cast<int64_t>(std::numeric_limits<Field>::max());
    }
    if (spec.default_text.empty()) spec.default_text = toml_literal(spec.get(RunConfig{}));
    return spec;
  }
};

template <Layout LayoutConfig::*Module>
std::vector<SchemaKey> layout_keys(const std::string& module) {
  const Section<&RunConfig::layout, Module> layout{"layout." + module};
  return {
      layout.template key<&Layout::tp>("tp", at_least(1), module + " tensor-parallel ways"),
      layout.template key<&Layout::cp>("cp", at_least(1), module + " context-parallel ways"),
      layout.template key<&Layout::pp>("pp", at_least(1), module + " pipeline stages"),
      layout.template key<&Layout::dp>("dp", at_least(1), module + " data-parallel ways"),
  };
}

std::vector<SchemaKey> build_schema() {
  const Section<&RunConfig::run> run{"run"};
  const Section<&RunConfig::encoder> encoder{"encoder"};
  const Section<&RunConfig::llm> llm{"llm"};
  const Section<&RunConfig::data> data{"data"};
  const Section<&RunConfig::optim> optim{"optim"};
  const Section<&RunConfig::layout> layout{"layout"};
  const Section<&RunConfig::runtime> runtime{"runtime"};
  using Enc = EncoderConfig;
  // One row per key reads as a table.
  // clang-format off
  std::vector<SchemaKey> keys = {
      run.key<&RunSection::name>("name", plain_name(), "label of the run in logs and results; names its default output directory", "(run file stem)"),
      run.key<&RunSection::seed>("seed", at_least(0), "seed for weights and synthetic data"),
      run.key<&RunSection::steps>("steps", at_least(1), "optimizer steps to run"),
      run.key<&RunSection::timing_warmup_steps>("timing_warmup_steps", at_least(0),
          "first steps left out of the timing summary (all count when the run is shorter)"),
      run.key<&RunSection::checkpoint_every>("checkpoint_every", at_least(0),
          "write a checkpoint every this many steps into OUT/checkpoints (train --resume continues from it); 0 = none"),
      run.key<&RunSection::precision>("precision", one_of({"auto", "fp32", "bf16"}),
          "bf16: matmuls and activations in bf16 under autocast, weights, gradients, their reduction and the "
          "optimizer in fp32; auto: bf16 on a GPU, fp32 on CPU"),
      run.key<&RunSection::fp32_residual>("fp32_residual", any_value(),
          "under bf16: keep the residual stream (the embeddings, each layer's sums, the activations pipeline "
          "stages pass on) in fp32; false: in bf16 like the other activations (half the bytes its norms save "
          "and its stages send, a little precision lost in the sums); no effect in fp32"),
      run.key<&RunSection::recompute>("recompute", one_of({"none", "full"}),
          "full: every transformer layer of both modules keeps only its input for the backward and runs its "
          "forward again there (activation memory of a layer's input instead of its whole work; about a third "
          "more compute; the same numbers)"),
      run.key<&RunSection::recompute_layers>("recompute_layers", at_least(0),
          "with recompute = \"full\": only the first this many transformer layers of each pipeline stage of "
          "each module recompute (all of a stage that holds fewer); 0 = every layer. Fewer layers: less "
          "compute, more memory"),
      run.key<&RunSection::recompute_modules>("recompute_modules", one_of({"both", "llm", "encoder"}),
          "with recompute = \"full\": the modules whose transformer layers recompute (llm: the encoder keeps its "
          "work, where the LLM's activations are what does not fit)"),
      run.key<&RunSection::checkpoint_keep>("checkpoint_keep", at_least(1), "newest complete checkpoints kept; older ones are removed"),
      run.key<&RunSection::eval_every>("eval_every", at_least(0),
          "every this many steps, the loss of held-out synthetic batches (the same image classes and text rules, "
          "samples no step trains on), run forward only under the layout's own schedule: eval_loss in "
          "steps.jsonl, not part of the step's time; 0 = never"),
      run.key<&RunSection::eval_batches>("eval_batches", at_least(1),
          "held-out global batches (data.global_batch_size samples each) every evaluation runs; the same ones each time"),
      encoder.key<&Enc::image_size>("image_size", at_least(1), "side of the square input image, pixels"),
      encoder.key<&Enc::patch_size>("patch_size", at_least(1), "side of a square patch, pixels"),
      encoder.key<&Enc::channels>("channels", at_least(1), "colour channels per pixel"),
      encoder.key<&Enc::hidden>("hidden", at_least(1), "hidden size"),
      encoder.key<&Enc::layers>("layers", at_least(1), "transformer layers"),
      encoder.key<&Enc::heads>("heads", at_least(1), "attention heads"),
      encoder.key<&Enc::mlp_hidden>("mlp_hidden", at_least(1), "hidden size of the MLP block"),
      encoder.key<&Enc::frozen>("frozen", any_value(), "when true, no gradients or optimizer state"),
      encoder.key<&Enc::norm_eps>("norm_eps", positive_finite(), "LayerNorm epsilon"),
      encoder.key<&Enc::hidden_act>("hidden_act", one_of({"gelu_pytorch_tanh", "gelu"}), "MLP activation (gelu = the exact erf form)"),
      encoder.key<&Enc::projector_act>("projector_act", one_of({"gelu_pytorch_tanh", "gelu"}), "activation between the projector's two linear layers"),
      encoder.key<&Enc::drop_first_token>("drop_first_token", any_value(), "when true, the first patch token of each image is not passed to the LLM (LLaVA's vision_feature_select_strategy = \"default\")"),
      llm.key<&LlmConfig::vocab_size>("vocab_size", at_least(4), "vocabulary size (ids 0 and 1 are pad and BOS; llm.image_token_id the image placeholder)"),
      llm.key<&LlmConfig::hidden>("hidden", at_least(1), "hidden size"),
      llm.key<&LlmConfig::layers>("layers", at_least(1), "transformer layers"),
      llm.key<&LlmConfig::heads>("heads", at_least(1), "attention (query) heads"),
      llm.key<&LlmConfig::kv_heads>("kv_heads", at_least(1), "key/value heads (grouped-query attention)"),
      llm.key<&LlmConfig::ffn_hidden>("ffn_hidden", at_least(1), "hidden size of the feed-forward block"),
      llm.key<&LlmConfig::seq_len>("seq_len", at_least(1), "tokens per sample, image tokens included"),
      llm.key<&LlmConfig::norm_eps>("norm_eps", positive_finite(), "RMSNorm epsilon"),
      llm.key<&LlmConfig::rope_theta>("rope_theta", positive_finite(), "RoPE base"),
      llm.key<&LlmConfig::image_token_id>("image_token_id", at_least(2), "token id of an image placeholder (0 and 1 are pad and BOS); below llm.vocab_size"),
      data.key<&DataConfig::global_batch_size>("global_batch_size", at_least(1), "samples per optimizer step, whole job"),
      data.key<&DataConfig::micro_batch_size>("micro_batch_size", at_least(1), "samples per micro-batch on one llm dp rank"),
      data.key<&DataConfig::images_min>("images_min", at_least(0), "fewest images per sample"),
      data.key<&DataConfig::images_max>("images_max", at_least(0), "most images per sample (uniform in [min, max]); "
          "with data.files, the most a sample is expected to hold (the memory model and planner count it)"),
      data.key<&DataConfig::files>("files", any_value(),
          "a directory (relative to where hetpar runs) of batch files to train on instead of the synthetic data: "
          "every *.safetensors in it, in name order, each with input_ids and labels [samples, <= llm.seq_len] "
          "(int64 or int32; labels unshifted, -100 = no loss) and pixel_values [images, C, H, W], one image per "
          "run of encoder tokens_per_image placeholders; epochs over its samples, step by step", "(synthetic)"),
      data.key<&DataConfig::shuffle>("shuffle", any_value(),
          "with data.files: each epoch's samples in an order drawn from run.seed and the epoch (false: the files' "
          "order)"),
      data.key<&DataConfig::eval_files>("eval_files", any_value(),
          "a directory of batch files (as data.files) whose first run.eval_batches global batches are the "
          "held-out evaluation's; needed for run.eval_every with data.files", "(synthetic held-out)"),
      optim.key<&OptimConfig::lr>("lr", positive_finite(), "peak learning rate (AdamW)"),
      optim.key<&OptimConfig::min_lr>("min_lr", non_negative_finite(), "learning rate at the end of the cosine decay"),
      optim.key<&OptimConfig::warmup_steps>("warmup_steps", at_least(0), "steps of linear warm-up from 0 to lr"),
      optim.key<&OptimConfig::weight_decay>("weight_decay", non_negative_finite(), "decoupled weight decay of matrices"),
      optim.key<&OptimConfig::beta1>("beta1", unit_interval(), "AdamW first-moment decay"),
      optim.key<&OptimConfig::beta2>("beta2", unit_interval(), "AdamW second-moment decay"),
      optim.key<&OptimConfig::eps>("eps", positive_finite(), "AdamW denominator epsilon"),
      optim.key<&OptimConfig::grad_clip>("grad_clip", non_negative_finite(), "clip the global gradient norm to this; 0 turns clipping off"),
      optim.key<&OptimConfig::shard_state>("shard_state", any_value(),
          "split the AdamW moments and the update over each module's data-parallel (x CP) group: the gradients "
          "are reduce-scattered and the updated weights all-gathered"),
      layout.key<&LayoutConfig::placement>("placement", placement_names(),
          "colocated = both modules on the same ranks; non-colocated = encoder ranks, then llm ranks; "
          "uniform = the encoder takes the llm's layout and ranks"),
      layout.key<&LayoutConfig::run_ahead>("run_ahead", at_least(1),
          "non-colocated: micro-batches the encoder ranks may run ahead of the llm ranks (1 = they alternate)"),
      layout.key<&LayoutConfig::encoder_schedule>("encoder_schedule", one_of({"bubble_fill", "whole_step"}),
          "colocated with llm pp: bubble_fill places each micro-batch's encoder work where the pipeline would "
          "wait; whole_step encodes every micro-batch first and back-propagates them all last"),
      layout.key<&LayoutConfig::encoder_in_flight>("encoder_in_flight", at_least(0),
          "colocated with llm pp, bubble_fill: micro-batches a rank may hold encoded but not yet "
          "back-propagated (bounds the encoder's activations); 0 = llm pp + 1, else at least llm pp"),
  };
  for (const auto& module_keys : {layout_keys<&LayoutConfig::encoder>("encoder"), layout_keys<&LayoutConfig::llm>("llm")}) {
    keys.insert(keys.end(), module_keys.begin(), module_keys.end());
  }
  // The LLM's alone: the encoder's sequences stay whole (tp/sequence_split.hpp).
  const Section<&RunConfig::layout, &LayoutConfig::llm> llm_layout{"layout.llm"};
  keys.push_back(llm_layout.key<&Layout::sp>("sp", any_value(),
      "sequence parallelism: outside their sharded matmuls the llm's TP ranks each hold a 1/tp of the sequence "
      "(norms, residual stream and what they save; all-gather and reduce-scatter where tp alone all-reduces); no "
      "effect at tp 1; llm.seq_len must divide by cp x tp"));
  keys.insert(keys.end(), {
      runtime.key<&RuntimeConfig::device>("device", one_of({"auto", "cpu", "cuda"}),
          "where the run computes, one rank per GPU; auto: cuda where a GPU is visible, else cpu"),
      runtime.key<&RuntimeConfig::tf32>("tf32", any_value(),
          "cuda with run.precision = fp32: let matmuls round their inputs to TF32 (faster, about 1e-3 relative); "
          "false keeps fp32 exact"),
      runtime.key<&RuntimeConfig::backend>("backend", one_of({"auto", "gloo", "nccl"}), "process-group backend; auto: nccl on cuda, gloo on cpu"),
      runtime.key<&RuntimeConfig::nccl_split>("nccl_split", any_value(),
          "nccl: create every sub-group by splitting the world's communicator (one collective, no new "
          "rendezvous); false initialises each on its own"),
      runtime.key<&RuntimeConfig::timeout_s>("timeout_s", positive_finite(), "seconds a collective or the rendezvous may take"),
      runtime.key<&RuntimeConfig::overlap_grad_reduce>("overlap_grad_reduce", any_value(),
          "start each data-parallel gradient bucket's sum as soon as its gradients are final in the step's last "
          "backward, instead of all of them after it (the sums are the same to the bit)"),
      runtime.key<&RuntimeConfig::grad_bucket_mib>("grad_bucket_mib", mib_size(),
          "MiB of gradients summed over data-parallel replicas in one collective (a larger parameter alone)"),
      runtime.key<&RuntimeConfig::intra_op_threads>("intra_op_threads", at_least(1), "torch intra-op threads per rank"),
      runtime.key<&RuntimeConfig::profile_step>("profile_step", at_least(0),
          "record an op-level profile of this step on every rank (OUT/profile_rank<R>.json and .txt); 0 = none"),
  });
  // clang-format on
  return keys;
}

// ---- reading ------------------------------------------------------------------

// NODE as a value of KIND; integers are accepted where floats are expected.
std::optional<SchemaValue> as_kind(const toml::node& node, ValueKind kind) {
  switch (kind) {
    case ValueKind::Integer:
      if (const auto* v = node.as_integer()) return v->get();
      break;
    case ValueKind::Float:
      if (const auto* v = node.as_floating_point()) return v->get();
      if (const auto* v = node.as_integer()) return static_cast<double>(v->get());
      break;
    case ValueKind::Boolean:
      if (const auto* v = node.as_boolean()) return v->get();
      break;
    case ValueKind::String:
      if (const auto* v = node.as_string()) return v->get();
      break;
  }
  return std::nullopt;
}

std::string with_article(const std::string& noun) {
  return (std::string("aeiou").find(noun.front()) == std::string::npos ? "a " : "an ") + noun;
}

std::string range_violation(const SchemaKey& spec, const SchemaValue& value) {
  if (spec.kind == ValueKind::Integer && std::get<int64_t>(value) > spec.max_integer) {
    return "must be <= " + std::to_string(spec.max_integer) + ", got " + toml_literal(value);
  }
  return spec.allowed.violation(value);
}

}  // namespace

std::string SchemaKey::section() const { return key.substr(0, key.rfind('.')); }
std::string SchemaKey::name() const { return key.substr(key.rfind('.') + 1); }

const std::vector<SchemaKey>& run_schema() {
  static const std::vector<SchemaKey> schema = build_schema();
  return schema;
}

void read_schema_values(const TomlDocument& doc, RunConfig& config) {
  for (const SchemaKey& spec : run_schema()) {
    const toml::node* node = doc.find(spec.key);
    if (node == nullptr) continue;
    const std::optional<SchemaValue> value = as_kind(*node, spec.kind);
    if (!value) {
      throw ConfigError(
          doc.origin(node), spec.key,
          "expected " + with_article(kind_name(spec.kind)) + ", got " + describe_node(*node));
    }
    if (const std::string why = range_violation(spec, *value); !why.empty()) {
      throw ConfigError(doc.origin(node), spec.key, why);
    }
    spec.set(config, *value);
  }
}

std::string kind_name(ValueKind kind) {
  static const char* const names[] = {"integer", "float", "boolean", "string"};  // enum order
  return names[static_cast<int>(kind)];
}

std::string toml_literal(const SchemaValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return toml_quoted(*text);
  if (const auto* number = std::get_if<double>(&value)) {
    char buffer[64];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, *number).ptr;  // shortest exact
    std::string text(buffer, end);
    // TOML floats need a '.' or an exponent; "inf"/"nan" are already TOML.
    if (text.find_first_of(".ein") == std::string::npos) text += ".0";
    return text;
  }
  if (const auto* flag = std::get_if<bool>(&value)) return *flag ? "true" : "false";
  return std::to_string(std::get<int64_t>(value));
}

}  // namespace hetpar
