#include "train/train_job.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "checkpoint/checkpoint_io.hpp"
#include "checkpoint/checkpoint_manifest.hpp"
#include "data/data_sources.hpp"
#include "dist/device.hpp"
#include "dist/module_groups.hpp"
#include "dist/runtime.hpp"
#include "interop/hf_export.hpp"
#include "interop/hf_llava.hpp"
#include "train/job_setup.hpp"
#include "metrics/op_profile.hpp"
#include "metrics/run_summary.hpp"
#include "train/run_metrics.hpp"
#include "train/step_report.hpp"
#include "train/step_schedule.hpp"
#include "train/forward_only_loss.hpp"
#include "train/fused_adamw.hpp"
#include "train/grad_reducer.hpp"
#include "train/grad_sync.hpp"
#include "train/multimodal_model.hpp"
#include "train/partial_grad_sum.hpp"
#include "train/sharded_optimizer.hpp"
#include "tp/partial_grads.hpp"
#include "util/durable_file.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

using Clock = std::chrono::steady_clock;

// HETPAR_FAULT=RANK:STEP makes that rank die abruptly at that step: the way
// tests check that a lost rank ends the whole job with a clear report.
// HETPAR_FAULT=RANK:STEP:oom instead fails an allocation there, as the
// allocator does when memory runs out.
void maybe_inject_fault(int rank, int64_t step) {
  const char* spec = std::getenv("HETPAR_FAULT");
  int fault_rank = -1;
  long long fault_step = -1;
  char kind[8] = "";
  const int fields = spec ? std::sscanf(spec, "%d:%lld:%7s", &fault_rank, &fault_step, kind) : 0;
  if (fields < 2 || fault_rank != rank || fault_step != step) return;
  if (std::string(kind) == "oom") {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "HETPAR_FAULT: an allocation failed at step ", step);
  }
  log_error("HETPAR_FAULT: rank {} exits abruptly at step {}", rank, step);
  _exit(kExitInjectedFault);
}

// A module's trainable parameters, and their names, in the reverse of the
// order the model registers them (the forward's): about the order the last
// backward finishes their gradients in, so buckets of them fill one by one.
struct ReductionOrder {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
};
ReductionOrder reduction_order(const MultimodalModel& model, bool encoder_side,
                               const MultimodalModel::ParameterSets& trainable) {
  const size_t expected = trainable.sharded.size() + trainable.replicated.size();
  ReductionOrder order;
  const auto named = model.named_parameters();
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    if (it->on_encoder_side != encoder_side || !it->tensor.requires_grad()) continue;
    order.params.push_back(it->tensor);
    order.names.push_back(it->name);
  }
  if (order.params.size() != expected) {
    throw std::logic_error(fmt::format("the {} has {} trainable parameters but names {}",
                                       encoder_side ? "encoder" : "llm", expected, order.params.size()));
  }
  return order;
}

std::optional<GradReducer> make_reduction(const MultimodalModel& model, bool encoder_side,
                                          const MultimodalModel::ParameterSets& trainable, ModuleGroups& module,
                                          const RuntimeConfig& runtime, bool shard) {
  if (!module.active()) return std::nullopt;
  ReductionOrder order = reduction_order(model, encoder_side, trainable);
  const auto bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(runtime.grad_bucket_mib * (1 << 20)));
  return std::optional<GradReducer>(std::in_place, std::move(order.params), module.get(GroupKind::kDataContext),
                                    bucket_bytes, runtime.overlap_grad_reduce, std::move(order.names), shard);
}

// The run's summary.json: its metadata, the steps it ran, medians after the warm-up.
void finish_summary(nlohmann::json& summary, const std::vector<nlohmann::json>& step_lines, const RunConfig& config,
                    const std::string& out_dir) {
  summary["steps"] = static_cast<int64_t>(step_lines.size());
  summary["first_loss"] = step_lines.front()["loss"];
  summary["last_loss"] = step_lines.back()["loss"];
  for (auto line = step_lines.rbegin(); line != step_lines.rend(); ++line) {
    if (line->contains("eval_loss")) {
      summary["last_eval_loss"] = (*line)["eval_loss"];
      summary["last_eval_step"] = (*line)["step"];
      break;
    }
  }
  summary.update(summarize_steps(step_lines, config.run.timing_warmup_steps));
  write_file_atomic(out_dir + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace

int run_train_job(const RunConfig& config, const LaunchEnv& env, const TrainOutputs& outputs) {
  const std::string& out_dir = outputs.out_dir;
  const at::Device device = select_device(config, env);  // before anything touches CUDA or NCCL
  Runtime runtime(env, runtime_options(config.runtime, device));
  JobGroups groups(runtime, config.placement);
  ModuleGroups& llm = groups.llm();
  ModuleGroups& encoder = groups.encoder();
  const bool leader = runtime.rank() == 0;

  const std::unique_ptr<MultimodalModel> rank_part = rank_model(config, groups, device);
  MultimodalModel& model = *rank_part;
  if (!outputs.init_hf.empty()) {
    const std::string note = load_hf(model, groups, runtime.world(), outputs.init_hf);
    if (leader && !note.empty()) log_info("{}: {}", outputs.init_hf, note);
  }
  const std::vector<at::Tensor> params = model.trainable_parameters();
  const std::unique_ptr<BatchSource> training = training_data(config, device);
  const BatchSource& data = *training;
  const std::unique_ptr<BatchSource> held_out = config.run.eval_every > 0 ? held_out_data(config, device) : nullptr;
  const auto encoder_params = model.encoder_side(), llm_params = model.llm_side();
  // Each module's gradients summed over its own DP x CP group (CP ranks hold partial gradients of the same replica).
  std::optional<GradReducer> encoder_reduction =
      make_reduction(model, true, encoder_params, encoder, config.runtime, config.optim.shard_state);
  std::optional<GradReducer> llm_reduction =
      make_reduction(model, false, llm_params, llm, config.runtime, config.optim.shard_state);
  const StepReductions reductions{encoder_reduction ? &*encoder_reduction : nullptr,
                                  llm_reduction ? &*llm_reduction : nullptr};
  const std::vector<const GradReducer*> reducers = {reductions.encoder, reductions.llm};
  // Where a module shards its optimizer state (optim.shard_state), its updated weights are all-gathered after each step.
  auto sharded = [](GradReducer* r) { return r != nullptr && r->sharded() ? r : nullptr; };
  std::vector<GradReducer*> sharding;
  for (GradReducer* r : {reductions.encoder, reductions.llm}) {
    if (sharded(r) != nullptr) sharding.push_back(r);
  }
  // Sequence parallelism: the LLM's TP-partial gradients, summed over TP once a step after the DP x CP sum.
  std::optional<PartialGradSum> llm_partial;
  if (model.llm != nullptr) llm_partial.emplace(tp_partial_parameters(*model.llm), llm.get(GroupKind::kTp), reductions.llm);
  FusedAdamW optimizer(optimizer_targets(params, reducers), config.optim);
  std::vector<NormShare> norm_shares;
  // After the sync over dp x cp every replica and CP rank holds the same gradients: one of them counts.
  auto first_replica = [](const ModuleGroups& m) { return m.coord().dp == 0 && m.coord().cp == 0; };
  if (encoder.active()) {
    norm_shares.push_back({&encoder_params, first_replica(encoder), encoder.coord().tp == 0, sharded(reductions.encoder)});
  }
  if (llm.active()) norm_shares.push_back({&llm_params, first_replica(llm), llm.coord().tp == 0, sharded(reductions.llm)});

  const CheckpointParts checkpoint_parts{config, model, optimizer, runtime.world(),
                                        encoder.active() ? encoder.coord().tp : 0, llm.active() ? llm.coord().tp : 0,
                                        reducers};
  int64_t first_step = 1;
  std::vector<nlohmann::json> step_lines;  // the leader's record of every step, earlier runs' included
  if (!outputs.resume.empty()) {
    const std::string checkpoint = *latest_complete_checkpoint(outputs.resume);  // the launcher checked it
    load_checkpoint(checkpoint_parts, checkpoint);
    first_step = read_manifest(checkpoint).step + 1;
    if (leader) step_lines = steps_through(outputs.resume, first_step - 1);  // the launcher checked them
    if (leader) log_info("resuming from {} at step {}", checkpoint, first_step);
  }

  const int64_t micro_batches = micro_batches_per_step(config);
  RunMetrics metrics(config, runtime, data, device);

  AppendFile steps_file;
  if (leader) {
    ensure_writable_dir(out_dir);
    write_file_atomic(out_dir + "/config.toml", to_toml(config));
    // A resumed run keeps the steps up to its checkpoint and continues after them.
    std::string earlier;
    for (const nlohmann::json& line : step_lines) earlier += line.dump() + "\n";
    write_file_atomic(out_dir + "/steps.jsonl", earlier);
    steps_file = AppendFile(out_dir + "/steps.jsonl", /*truncate=*/false);
    log_info("resolved run configuration:\n{}", to_toml(config));
    int64_t count = 0;
    for (const at::Tensor& p : params) count += p.numel();
    log_info("{} ranks on {} ({}), backend {}, {}, launched by {}; {} trainable parameters on rank 0; {} "
             "micro-batches of {} per dp rank", runtime.world_size(), config.runtime.device, device_name(device),
             runtime.backend(), config.run.precision, env.launcher, count, micro_batches, config.data.micro_batch_size);
    log_info("training on {}", data.description());
    if (held_out) log_info("held-out evaluation every {} steps on {}", config.run.eval_every, held_out->description());
    log_info("model FLOPs per step:\n{}", metrics.assumptions());
    const nlohmann::json meta = metrics.metadata();
    if (config.layout.llm.sp && !config.placement.llm.sp) {  // resolve_placement cleared it
      log_error("warning: layout.llm.sp has no effect at layout.llm.tp = 1: one rank holds the whole sequence anyway");
    }
    if (device.is_cpu() && meta["ranks_per_core"].get<double>() > 1.0) {
      log_error("warning: {} ranks x {} thread(s) on {} cores: ranks share cores, so these timings are not "
                "comparable with a machine where each rank has its own", runtime.world_size(),
                config.runtime.intra_op_threads, meta["cores"].get<int>());
    }
  }

  nlohmann::json summary = metrics.metadata();
  PhaseTimer timer(device);
  for (int64_t step = first_step; step <= config.run.steps; ++step) {
    maybe_inject_fault(runtime.rank(), step);
    std::optional<OpProfile> profile;
    if (step == config.runtime.profile_step) profile.emplace(device.is_cuda());
    reset_peak_memory(device);
    std::optional<HostSyncCheck> no_host_sync(std::in_place, device);
    const auto t0 = Clock::now();
    const double lr = learning_rate(config.optim, step, config.run.steps);
    optimizer.set_lr(lr);
    drop_gradients(params);
    const double target_tokens = data.loss_divisor(step, step, fmt::format("step {}", step));
    for (GradReducer* r : {reductions.encoder, reductions.llm}) {
      if (r != nullptr) r->begin_step();
    }
    const StepContext ctx{model, data, config, groups, runtime.world(), timer, step, micro_batches, target_tokens,
                          reductions};
    const at::Tensor local_loss = run_micro_batches(ctx);
    at::Tensor grad_norm;
    {
      // What the last backward has not started yet, every bucket waited for, then the norm.
      auto timed = timer.measure(Phase::kGradSync);
      GradReducer::Stats buckets;
      for (GradReducer* r : {reductions.encoder, reductions.llm}) {
        if (r == nullptr) continue;
        r->finish();
        buckets.buckets += r->last_step().buckets;
        buckets.started_in_backward += r->last_step().started_in_backward;
      }
      if (llm_partial) llm_partial->sum();
      summary["grad_buckets"] = {{"buckets", buckets.buckets}, {"started_in_backward", buckets.started_in_backward}};
      grad_norm = global_grad_norm(runtime.world(), norm_shares, device);
    }
    {
      auto timed = timer.measure(Phase::kOptimizer);
      clip_gradients(optimizer.gradients(), grad_norm, config.optim.grad_clip);
      optimizer.step();
      for (GradReducer* r : sharding) r->gather_params();
    }
    // The step's one host sync: everything it queued done, within the timeout.
    no_host_sync.reset();
    wait_for_device(device, runtime.timeout());
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const StepReport report = gather_step_report(runtime.world(), local_loss.item<double>(), peak_memory_bytes(device),
                                                 peak_tensor_bytes(device),
                                                 timer.take(), device);
    const double norm = grad_norm.item<double>();
    if (profile) {
      ensure_writable_dir(out_dir);
      const std::string top = profile->finish(fmt::format("{}/profile_rank{}", out_dir, runtime.rank()));
      if (leader) log_info("op profile of step {} on rank 0, by self time (all ranks: {}/profile_rank*.txt):\n{}", step, out_dir, top);
    }
    // Every rank holds the same loss (gathered) and norm (all-reduced), so all stop together.
    const bool diverged = !std::isfinite(report.loss) || !std::isfinite(norm);
    // After the step is timed and its memory read: the evaluation is neither's.
    std::optional<double> eval_loss, eval_seconds;
    if (!diverged && config.run.eval_every > 0 && step % config.run.eval_every == 0) {
      const auto e0 = Clock::now();
      eval_loss = forward_only_loss(model, *held_out, config, groups, runtime.world(), config.run.eval_batches).loss;
      eval_seconds = std::chrono::duration<double>(Clock::now() - e0).count();
    }
    if (leader) {
      nlohmann::json line = metrics.step_line({step, report.loss, norm, lr, seconds}, report);
      if (diverged) line["diverged"] = true;  // JSON has no NaN: the loss is written as null
      if (eval_loss) {
        line["eval_loss"] = *eval_loss;
        line["eval_seconds"] = *eval_seconds;
      }
      steps_file.append_line(line.dump());
      log_info("{}", metrics.step_text(line));
      step_lines.push_back(line);
    }
    if (diverged) {
      if (leader) {
        summary["status"] = "diverged";
        summary["diverged_step"] = step;
        finish_summary(summary, step_lines, config, out_dir);
        log_error("error: the loss diverged at step {} (loss {}, gradient norm {}); the run stops here. "
                  "Its steps and summary record it; try a lower optim.lr or optim.grad_clip > 0",
                  step, report.loss, norm);
      }
      return kExitDiverged;
    }
    if (config.run.checkpoint_every > 0 && step % config.run.checkpoint_every == 0) {
      save_checkpoint(checkpoint_parts, out_dir, step);
    }
  }
  if (!outputs.save_hf.empty()) {
    save_hf(config, model, groups, runtime.world(), outputs.save_hf);
    if (leader) log_info("wrote a transformers LLaVA model to {}/", outputs.save_hf);
  }
  if (leader) {
    summary["status"] = "ok";
    finish_summary(summary, step_lines, config, out_dir);
    log_info("median over {} steps after {} warm-up: {:.1f} ms/step, {:.4f} TFLOPS/rank, MFU {:.1f}%, {:.0f} "
             "tokens/s", summary["timed_steps"].get<int64_t>(), summary["warmup_steps"].get<int64_t>(),
             summary["step_seconds_median"].get<double>() * 1e3, summary["tflops_per_gpu"].get<double>(),
             100 * summary["mfu"].get<double>(), summary["tokens_per_second"].get<double>());
    log_info("done: {} steps, results in {}/", config.run.steps, out_dir);
  }
  return 0;
}

}  // namespace hetpar
