#include "train/eval_job.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <filesystem>

#include "data/file_batch.hpp"
#include "data/file_dataset.hpp"
#include "dist/device.hpp"
#include "interop/hf_llava.hpp"
#include "train/job_setup.hpp"
#include "train/forward_only_loss.hpp"
#include "util/log.hpp"

namespace hetpar {

int run_eval_job(const RunConfig& config, const LaunchEnv& env, const std::string& init_hf, const std::string& batch) {
  const at::Device device = select_device(config, env);
  Runtime runtime(env, runtime_options(config.runtime, device));
  JobGroups groups(runtime, config.placement);
  const std::unique_ptr<MultimodalModel> model = rank_model(config, groups, device);
  const std::string note = load_hf(*model, groups, runtime.world(), init_hf);
  if (runtime.rank() == 0 && !note.empty()) log_info("{}: {}", init_hf, note);
  // A file is one step; a directory every full step of data.global_batch_size samples in the files' order.
  std::unique_ptr<BatchSource> samples;
  int64_t batches = 1, left_out = 0;
  if (std::filesystem::is_directory(batch)) {
    auto files = std::make_unique<FileDataset>(batch, config, device, /*shuffle=*/false, 0);
    batches = files->samples() / config.data.global_batch_size;
    left_out = files->samples() % config.data.global_batch_size;
    samples = std::move(files);
  } else {
    samples = std::make_unique<FileBatch>(batch, config, device);
  }
  const ForwardOnlyLoss eval = forward_only_loss(*model, *samples, config, groups, runtime.world(), batches);
  if (runtime.rank() == 0) {
    log_info("eval loss: {:.9g} over {} target tokens in {} batch(es) of {} samples{}", eval.loss, eval.target_tokens,
             batches, config.data.global_batch_size,
             left_out > 0 ? fmt::format(" ({} samples after the last full batch left out)", left_out) : "");
  }
  return 0;
}

}  // namespace hetpar
