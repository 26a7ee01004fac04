#include "train/eval_job.hpp"

#include <ATen/ATen.h>

#include "data/file_batch.hpp"
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
  const FileBatch samples(batch, config, device);
  const double value = forward_only_loss(*model, samples, config, groups, runtime.world(), /*batches=*/1);
  if (runtime.rank() == 0) log_info("eval loss: {:.9g} over {} target tokens", value, samples.target_tokens(1));
  return 0;
}

}  // namespace hetpar
