#include "train/eval_job.hpp"

#include <ATen/ATen.h>

#include "data/file_batch.hpp"
#include "dist/device.hpp"
#include "interop/hf_llava.hpp"
#include "train/job_setup.hpp"
#include "train/step_schedule.hpp"
#include "util/log.hpp"

namespace hetpar {

int run_eval_job(const RunConfig& config, const LaunchEnv& env, const std::string& init_hf, const std::string& batch) {
  const at::Device device = select_device(config, env);
  Runtime runtime(env, runtime_options(config.runtime, device));
  JobGroups groups(runtime, config.placement);
  const std::unique_ptr<MultimodalModel> model = rank_model(config, groups, device);
  const std::string note = load_hf(*model, groups, runtime.world(), init_hf);
  if (runtime.rank() == 0 && !note.empty()) log_info("{}: {}", init_hf, note);
  // The batch is one training step of the layout's own schedule, without
  // the gradients' sums or an optimizer step: its loss is the step's.
  const FileBatch samples(batch, config, device);
  PhaseTimer timer(device);
  constexpr int64_t kStep = 1;
  const double target_tokens = static_cast<double>(samples.target_tokens(kStep));
  const StepContext ctx{*model, samples, config, groups, runtime.world(), timer, kStep, micro_batches_per_step(config),
                        target_tokens};
  at::Tensor loss = run_micro_batches(ctx).to(at::kDouble).reshape({1}).clone();
  runtime.world().all_reduce(loss);  // each replica's last stage holds its samples' share
  const double value = loss.item<double>();
  if (runtime.rank() == 0) log_info("eval loss: {:.9g} over {} target tokens", value, static_cast<int64_t>(target_tokens));
  return 0;
}

}  // namespace hetpar
