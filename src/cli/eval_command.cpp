#include "cli/eval_command.hpp"

#include <filesystem>

#include "train/eval_job.hpp"
#include "util/log.hpp"

namespace hetpar {

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Print the loss of one batch (transformers conventions: input_ids, labels with -100, pixel_values) "
              "for a model loaded from a transformers LLaVA directory");
  cmd->add_option("--init-hf", args.init_hf, "transformers LLaVA directory (config.json + model.safetensors)")
      ->required();
  cmd->add_option("--batch", args.batch, "safetensors file with input_ids, labels and pixel_values")->required();
  add_job_options(*cmd, args.job, /*config_required=*/false);
  return cmd;
}

int run_eval(const EvalArgs& args) {
  if (!std::filesystem::exists(args.batch)) die(kExitConfigError, "no such file: " + args.batch);
  JobArgs job = args.job;
  job.hf_model_dir = args.init_hf;
  if (job.config.empty()) {
    // Without a run file the batch sets the sequence length; the synthetic data's
    // settings are moot here (the images_max default could outgrow a short batch).
    try {
      const std::string seq_len = "llm.seq_len=" + std::to_string(batch_sequence_length(args.batch));
      job.overrides.insert(job.overrides.begin(), {seq_len, "data.images_max=0"});
    } catch (const std::exception& e) {
      die(kExitConfigError, "batch: " + args.batch + ": " + error_message(e));
    }
  }
  // The batch is read and checked against the model before any rank starts.
  const Preflight check_batch = [&](const RunConfig& config) {
    try {
      read_hf_batch(args.batch, config);
    } catch (const std::exception& e) {
      throw ConfigError(args.batch, "batch", error_message(e));
    }
  };
  return run_job("eval", job, {"--init-hf", args.init_hf, "--batch", args.batch},
                 [&](const RunConfig& config, const LaunchEnv& env) {
                   return run_eval_job(config, env, args.init_hf, args.batch);
                 }, /*whole_model_on_every_rank=*/true, check_batch);
}

}  // namespace hetpar
