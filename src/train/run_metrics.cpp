#include "train/run_metrics.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include <thread>

#include "dist/device.hpp"
#include "metrics/model_flops.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/rank_grid.hpp"
#include "parallel/rank_parts.hpp"
#include "tp/weight_grad.hpp"
#include "util/build_info.hpp"

namespace hetpar {

namespace {

// Encoder and projector share of a step's FLOPs at the expected image count.
double encoder_share(const RunConfig& c) {
  const StepFlops f = step_flops(c, static_cast<int64_t>(expected_images_per_step(c) + 0.5));
  return f.total() > 0 ? (f.encoder_training + f.projector_training) / f.total() : 0.0;
}

}  // namespace

RunMetrics::RunMetrics(const RunConfig& config, Runtime& runtime, const BatchSource& data, const at::Device& device)
    : config_(config), data_(data), world_size_(runtime.world_size()), backend_(runtime.backend()),
      device_meta_(device_metadata(device)) {
  // Which weight-gradient path the backward takes (asked here, before any step: the question reads a value back).
  device_meta_["gemm_adds_into_fp32"] = gemm_adds_into_fp32(device);
  // MFU is against the peak of the precision the matmuls run in.
  const bool bf16 = computes_in_bf16(config);
  if (device.is_cuda()) {
    peak_ = gpu_peak(device, bf16, config.runtime.tf32);
    return;
  }
  runtime.world().barrier();  // measure together: the contention the run will see
  at::Tensor rate = at::full({1}, measure_cpu_gemm_flops(0.3, bf16), at::kDouble);
  runtime.world().all_reduce(rate);
  peak_.flops_per_second = rate.item<double>() / world_size_;
  peak_.source = fmt::format("measured {} GEMM rate per rank ({} intra-op thread(s), all ranks at once)",
                             bf16 ? "bf16" : "fp32", config.runtime.intra_op_threads);
}

nlohmann::json RunMetrics::step_line(const StepInputs& in, const StepReport& report) const {
  const int64_t images = data_.images_in_step(in.step);
  const double flops = step_flops(config_, images).total();
  const double llm_tokens = static_cast<double>(config_.data.global_batch_size * config_.llm.seq_len);
  const double image_tokens = static_cast<double>(images * config_.encoder.tokens_per_image());
  const double per_rank = flops / (in.seconds * world_size_);
  nlohmann::json line = {{"step", in.step},
                         {"loss", in.loss},
                         {"grad_norm", in.grad_norm},
                         {"lr", in.lr},
                         {"step_seconds", in.seconds},
                         {"flops", flops},
                         {"tflops_per_gpu", per_rank / 1e12},
                         {"mfu", per_rank / peak_.flops_per_second},
                         {"tokens_per_second", llm_tokens / in.seconds},
                         {"image_tokens_per_second", image_tokens / in.seconds},
                         {"samples_per_second", static_cast<double>(config_.data.global_batch_size) / in.seconds},
                         {"images", images},
                         {"peak_memory_mib", report.peak_memory_bytes / (1 << 20)},
                         {"critical_rank", report.critical_rank}};
  // Absent, not 0, where nothing counted it (another CPU allocator installed first).
  if (report.peak_tensor_bytes > 0) line["peak_tensor_mib"] = report.peak_tensor_bytes / (1 << 20);
  for (int p = 0; p < kPhaseCount; ++p) {
    line["phases"][std::string(phase_name(static_cast<Phase>(p)))] = report.critical_phases[p];
  }
  // Pipelined, the stages hold different layers and micro-batches in flight:
  // the largest peak among each stage's ranks.
  const ModulePlacement& placement = config_.placement;
  if (placement.llm.pp > 1 && report.peak_memory_by_rank.size() == static_cast<size_t>(placement.world_size)) {
    const RankGrid llm(placement.llm, placement.llm_ranks.offset);
    std::vector<double> by_stage(placement.llm.pp, 0);
    for (int r = llm.offset(); r < llm.offset() + llm.size(); ++r) {
      double& peak = by_stage[llm.coord(r).pp];
      peak = std::max(peak, report.peak_memory_by_rank[r] / (1 << 20));
    }
    line["peak_memory_mib_by_stage"] = by_stage;
  }
  // The largest tensor peak among each part's ranks, by the memory model's
  // names for them (plan.json's), so that every kind of rank's prediction
  // can be checked, not only the fullest one's.
  if (report.peak_tensor_bytes > 0 && report.peak_tensor_by_rank.size() == static_cast<size_t>(placement.world_size)) {
    for (const RankPart& part : rank_parts(placement)) {
      double peak = 0;
      for (int r : part.ranks) peak = std::max(peak, report.peak_tensor_by_rank[r] / (1 << 20));
      line["peak_tensor_mib_by_part"][part.what] = peak;
    }
  }
  return line;
}

std::string RunMetrics::step_text(const nlohmann::json& l) const {
  // A diverged step's loss or norm is null in JSON (no NaN there): print it as nan.
  auto number = [&](const char* key) {
    return l[key].is_number() ? l[key].get<double>() : std::numeric_limits<double>::quiet_NaN();
  };
  std::string text = fmt::format(
      "step {:>4} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:7.1f} ms | {:.3f} TFLOPS/rank | "
      "MFU {:4.1f}% | {:.0f} tokens/s | {:.0f} MiB",
      l["step"].get<int64_t>(), number("loss"), number("grad_norm"), l["lr"].get<double>(),
      l["step_seconds"].get<double>() * 1e3, l["tflops_per_gpu"].get<double>(), 100 * l["mfu"].get<double>(),
      l["tokens_per_second"].get<double>(), l["peak_memory_mib"].get<double>());
  if (l.contains("eval_loss")) {
    text += fmt::format(" | eval loss {:.4f} ({:.1f} ms)", number("eval_loss"), l["eval_seconds"].get<double>() * 1e3);
  }
  return text;
}

nlohmann::json RunMetrics::metadata() const {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto& c = config_;
  const int64_t micro_batches = micro_batches_per_step(c);
  nlohmann::json meta = {{"hetpar_version", build_version()},
          {"commit", build_commit()},
          {"torch_version", build_torch_version()},
          {"backend", backend_},
          {"device_count", world_size_},
          {"world_size", world_size_},
          {"cores", cores},
          {"ranks_per_core", static_cast<double>(world_size_ * c.runtime.intra_op_threads) / cores},
          {"peak_flops_per_rank", peak_.flops_per_second},
          {"peak_source", peak_.source},
          {"placement", to_string(c.placement.placement)},
          {"layout_encoder", c.placement.encoder.to_string()},
          {"layout_llm", c.placement.llm.to_string()},
          {"run_ahead", c.layout.run_ahead},
          {"encoder_schedule", c.layout.encoder_schedule},
          {"encoder_in_flight", c.layout.encoder_in_flight},
          {"micro_batches", micro_batches},
          {"bubble_1f1b", one_f_one_b_bubble_fraction(c.placement.llm.pp, micro_batches)},
          {"run", c.run.name},
          {"workload", fmt::format("encoder {}x{} (image {}, patch {}), llm {}x{} (seq {}), batch {}/{}",
                                   c.encoder.hidden, c.encoder.layers, c.encoder.image_size, c.encoder.patch_size,
                                   c.llm.hidden, c.llm.layers, c.llm.seq_len, c.data.global_batch_size,
                                   c.data.micro_batch_size)},
          {"precision", computes_in_bf16(c) ? "bf16" : "fp32"},
          {"encoder_frozen", c.encoder.frozen},
          {"encoder_params", encoder_parameters(c.encoder)},
          {"llm_params", llm_parameters(c.llm)},
          {"encoder_flops_share", encoder_share(c)},
          {"seed", c.run.seed}};
  meta.update(device_meta_);  // "device" and, on a GPU, its memory, driver, CUDA, NCCL and TF32
  return meta;
}

std::string RunMetrics::assumptions() const {
  return flops_assumptions(config_) +
         fmt::format("\ncompute peak: {:.2f} GFLOP/s per rank, {}", peak_.flops_per_second / 1e9, peak_.source);
}

}  // namespace hetpar
