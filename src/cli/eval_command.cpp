#include "cli/eval_command.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/file_batch.hpp"
#include "train/eval_job.hpp"
#include "util/log.hpp"

namespace hetpar {

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Print the loss of one batch (transformers conventions: input_ids, labels with -100, pixel_values) "
              "for a model loaded from a transformers LLaVA directory, under any layout (one step of its schedule, "
              "without an optimizer step)");
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
  // The step is the batch file's: its samples, one a micro-batch (a later
  // --set data.micro_batch_size takes more at once). Without a run file the
  // batch also sets the sequence length; the synthetic data's settings are
  // moot here (the images_max default could outgrow a short batch).
  std::vector<std::string> from_batch;
  try {
    const auto [samples, length] = batch_file_shape(args.batch);
    from_batch = {"data.global_batch_size=" + std::to_string(samples), "data.micro_batch_size=1"};
    if (job.config.empty()) from_batch.insert(from_batch.end(), {"llm.seq_len=" + std::to_string(length), "data.images_max=0"});
  } catch (const std::exception& e) {
    die(kExitConfigError, "batch: " + args.batch + ": " + error_message(e));
  }
  job.overrides.insert(job.overrides.begin(), from_batch.begin(), from_batch.end());
  job.settings_note = "eval sets --set " + fmt::format("{}", fmt::join(from_batch, " --set ")) + " from the batch file";
  // The batch is read and checked against the model before any rank starts.
  const Preflight check_batch = [&](const RunConfig& config) {
    try {
      FileBatch(args.batch, config);
    } catch (const std::exception& e) {
      throw ConfigError(args.batch, "batch", error_message(e));
    }
  };
  return run_job("eval", job, {"--init-hf", args.init_hf, "--batch", args.batch},
                 [&](const RunConfig& config, const LaunchEnv& env) {
                   return run_eval_job(config, env, args.init_hf, args.batch);
                 }, check_batch);
}

}  // namespace hetpar
