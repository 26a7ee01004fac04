// A run, fully described: the resolved contents of a run TOML file (with its
// includes and --set overrides applied), validated before anything starts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config_error.hpp"
#include "parallel/layout.hpp"
#include "parallel/placement.hpp"

namespace hetpar {

struct RunSection {
  std::string name;        // default: the run file's stem
  int64_t seed = 1234;
  int64_t steps = 10;
  int64_t timing_warmup_steps = 1;  // left out of the run's timing summary
  int64_t checkpoint_every = 0;     // steps between checkpoints; 0 = none
  int64_t checkpoint_keep = 2;      // newest complete checkpoints kept
  int64_t eval_every = 0;           // steps between held-out evaluations; 0 = none
  int64_t eval_batches = 1;         // held-out global batches each evaluation runs
  std::string precision = "auto";   // fp32 | bf16 | auto (bf16 on a GPU, fp32 on CPU)
  bool fp32_residual = true;        // under bf16: the residual stream in fp32 (true) or bf16 (false)
  std::string recompute = "none";   // none | full: transformer layers recompute their forward in the backward
  int64_t recompute_layers = 0;     // with full: each pipeline stage's first this many layers; 0 = all
  std::string recompute_modules = "both";  // with full: both | llm | encoder: the modules whose layers recompute
};

struct EncoderConfig {     // ViT (SigLIP/CLIP style)
  int64_t image_size = 32;
  int64_t patch_size = 8;
  int64_t channels = 3;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t mlp_hidden = 256;
  bool frozen = false;
  double norm_eps = 1e-6;                          // LayerNorm epsilon
  std::string hidden_act = "gelu_pytorch_tanh";    // MLP activation: gelu_pytorch_tanh | gelu (exact)
  std::string projector_act = "gelu_pytorch_tanh"; // projector activation, same choices
  bool drop_first_token = false;                   // the first patch token is not passed on (a CLS slot)
  int64_t patches_per_image() const { return (image_size / patch_size) * (image_size / patch_size); }
  // Embedding rows an image becomes in the LLM.
  int64_t tokens_per_image() const { return patches_per_image() - (drop_first_token ? 1 : 0); }
};

struct LlmConfig {         // Llama style
  int64_t vocab_size = 512;
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t ffn_hidden = 192;
  int64_t seq_len = 128;
  double norm_eps = 1e-5;       // RMSNorm epsilon
  double rope_theta = 10000.0;  // RoPE base
  int64_t image_token_id = 2;   // the placeholder id image rows replace
};

struct DataConfig {
  int64_t global_batch_size = 8;  // samples per optimizer step, whole job
  int64_t micro_batch_size = 2;   // samples per micro-batch on one LLM DP rank
  int64_t images_min = 0;         // images per sample, uniform in [min, max]
  int64_t images_max = 2;
  std::string files;               // a directory of batch files to train on; empty: synthetic data
  bool shuffle = true;             // data.files: each epoch in an order drawn from run.seed
  std::string eval_files;          // a directory of batch files for run.eval_every; empty: synthetic held-out
  // Not a run-file key: data.files' mean images per sample, measured from
  // their headers (data/data_sources.hpp, with_file_image_counts); when not
  // measured, the synthetic data's (images_min + images_max) / 2 counts.
  std::optional<double> files_images_per_sample;
  // Not a run-file key either: the most images any sample of data.files
  // holds, where every file has image_counts; the memory model bounds a
  // sample by it rather than by data.images_max (which still caps it).
  std::optional<int64_t> files_most_images;
};

struct OptimConfig {      // AdamW, linear warm-up then cosine decay to min_lr
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 10;
  double weight_decay = 0.01;     // matrices only; norms and biases get none
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;         // global grad-norm clipping; 0 = off
  bool shard_state = false;       // AdamW moments split over each module's DP x CP group
};

struct LayoutConfig {
  Placement placement = Placement::Uniform;
  Layout encoder;
  Layout llm;
  int64_t run_ahead = 2;  // non-colocated: micro-batches the encoder may run ahead of the LLM
  // Colocated with LLM PP: where each rank's encoder work goes in the step
  // (parallel/colocated_pipeline_schedule.hpp), and how many micro-batches a
  // rank may hold encoded but not yet back-propagated (0: pp + 1).
  std::string encoder_schedule = "bubble_fill";
  int64_t encoder_in_flight = 0;
};

struct RuntimeConfig {
  std::string device = "auto";    // "auto" (cuda with a visible GPU, else cpu), "cpu", "cuda"
  std::string backend = "auto";   // "auto" (nccl on cuda, gloo on cpu), "gloo", "nccl"
  bool nccl_split = true;         // nccl: sub-groups split from the world's communicator
  bool tf32 = false;              // cuda, fp32: let cuBLAS round matmul inputs to TF32 (faster, ~1e-3)
  double timeout_s = 60.0;        // per collective call and for rendezvous
  bool overlap_grad_reduce = true;  // start DP gradient buckets during the step's last backward
  double grad_bucket_mib = 32.0;    // most bytes a DP gradient bucket holds (one larger parameter alone)
  int64_t intra_op_threads = 1;   // torch intra-op threads per rank
  int64_t profile_step = 0;       // record an op-level profile of this step (0: none)
};

struct RunConfig {
  std::string source_file;        // the run file as given on the command line
  RunSection run;
  EncoderConfig encoder;
  LlmConfig llm;
  DataConfig data;
  OptimConfig optim;
  LayoutConfig layout;
  RuntimeConfig runtime;
  ModulePlacement placement;      // derived from `layout` by validation
};

// Whether the run computes in bf16 (autocast: fp32 weights, gradients and
// optimizer; bf16 matmuls and activations). "auto" is fp32 until
// resolve_device (config/device_choice.hpp) has made it bf16 on a GPU.
inline bool computes_in_bf16(const RunConfig& config) { return config.run.precision == "bf16"; }
// Whether the residual stream (the embeddings, each layer's sum, what pipeline
// stages pass on) is bf16: under bf16 with run.fp32_residual = false.
inline bool bf16_residual(const RunConfig& config) { return computes_in_bf16(config) && !config.run.fp32_residual; }
// The residual stream's bytes a value where activations take `activation_bytes`
// (the models take the width from a profile): 4, or the activations' width
// where it is narrower and run.fp32_residual = false keeps the stream with them.
inline double residual_value_bytes(const RunConfig& config, double activation_bytes) {
  return activation_bytes < 4 && !config.run.fp32_residual ? activation_bytes : 4;
}
// Whether transformer layers keep only their input and recompute their forward in the backward.
inline bool recomputes_layers(const RunConfig& config) { return config.run.recompute == "full"; }
// The two modules, where a setting may differ between them.
enum class Module { kEncoder, kLlm };
// How many of a pipeline stage's `stage_layers` transformer layers of
// `module` recompute (its first ones): all under run.recompute = "full"
// where run.recompute_modules names the module, unless run.recompute_layers
// caps them; none otherwise.
inline int64_t recomputed_layers(const RunConfig& config, Module module, int64_t stage_layers) {
  const std::string& modules = config.run.recompute_modules;
  if (!recomputes_layers(config) || modules == (module == Module::kLlm ? "encoder" : "llm")) return 0;
  return config.run.recompute_layers == 0 ? stage_layers : std::min(config.run.recompute_layers, stage_layers);
}

// Micro-batches a step on each LLM DP rank (the global batch over DP and micro-batch size).
inline int64_t micro_batches_per_step(const RunConfig& config) {
  return config.data.global_batch_size / (config.data.micro_batch_size * config.placement.llm.dp);
}

// Parses FILE, applies its `include = [...]` files (paths relative to the
// including file; the including file wins on conflicts) and then each
// override "dotted.key=value" (value in TOML syntax; a bare word is a string),
// validates everything and returns the resolved config.
// Throws ConfigError (file, key, reason) on the first problem.
RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides);

// The same over a base: BASE_TOML (the keys a checkpoint's config.json sets,
// named ORIGIN in errors) under FILE's keys, which win; FILE may be empty (no
// run file: ORIGIN is then the source).
RunConfig load_run_config_over(const std::string& base_toml, const std::string& origin, const std::string& file,
                               const std::vector<std::string>& overrides);

// A problem of a parsed config: why, and the keys involved (the first is the
// one to change; the others name where the rest of the rule comes from).
struct ConfigProblem {
  std::vector<std::string> keys;
  std::string reason;
};

// The first problem of the resolved config's values taken together (shapes
// against layouts, the pipeline's rules), or none: what load_run_config
// checks beyond each key's own type and range.
std::optional<ConfigProblem> consistency_problem(const RunConfig& config);

// What the trainer cannot run yet, or none (check_trainer_supports throws it).
std::optional<ConfigProblem> trainer_support_problem(const RunConfig& config);

// For configs built in code (the planner's candidates): resolves
// config.placement from config.layout, then the first problem of the
// placement, consistency_problem or trainer_support_problem.
std::optional<ConfigProblem> layout_problem(RunConfig& config);

// What the trainer can run today (the config format already describes
// more): throws ConfigError naming the layout otherwise.
void check_trainer_supports(const RunConfig& config);

// The job must be launched with exactly the ranks the placement needs.
// Throws ConfigError naming key "layout" otherwise.
void check_world_size(const RunConfig& config, int launched_world_size);

// Every key of a run file with its type, default and meaning: the text of
// `hetpar train --help`.
std::string describe_run_file();

// The resolved config as TOML (printed at start-up and saved beside results).
std::string to_toml(const RunConfig& config);

}  // namespace hetpar
