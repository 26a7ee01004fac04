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
  add_job_options(*cmd, args.job);
  return cmd;
}

int run_eval(const EvalArgs& args) {
  for (const std::string& path : {args.init_hf + "/model.safetensors", args.batch}) {
    if (!std::filesystem::exists(path)) die(kExitConfigError, "no such file: " + path);
  }
  // The batch is read and checked against the model before any rank starts.
  const Preflight check_batch = [&](const RunConfig& config) {
    try {
      read_hf_batch(args.batch, config);
    } catch (const std::exception& e) {
      throw ConfigError(args.batch, "batch", error_message(e));
    }
  };
  return run_job("eval", args.job, {"--init-hf", args.init_hf, "--batch", args.batch},
                 [&](const RunConfig& config, const LaunchEnv& env) {
                   return run_eval_job(config, env, args.init_hf, args.batch);
                 }, /*needs_full_model=*/true, check_batch);
}

}  // namespace hetpar
