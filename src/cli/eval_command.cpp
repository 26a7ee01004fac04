#include "cli/eval_command.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/file_batch.hpp"
#include "data/data_sources.hpp"
#include "data/file_dataset.hpp"
#include "train/eval_job.hpp"
#include "util/log.hpp"

namespace hetpar {

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Print the loss of one batch file, or of a directory of them (transformers conventions: input_ids, "
              "labels with -100, pixel_values), for a model loaded from a transformers LLaVA directory, under any "
              "layout (each batch one step of its schedule, forward only)");
  cmd->add_option("--init-hf", args.init_hf, "transformers LLaVA directory (config.json + model.safetensors)")
      ->required();
  cmd->add_option("--batch", args.batch,
                  "safetensors file with input_ids, labels and pixel_values (one step of all its samples), or a "
                  "directory of them (every full step of data.global_batch_size samples, in the files' order; the "
                  "loss is the mean over all their target tokens)")
      ->required();
  add_job_options(*cmd, args.job, /*config_required=*/false);
  return cmd;
}

int run_eval(const EvalArgs& args) {
  if (!std::filesystem::exists(args.batch)) die(kExitConfigError, "no such file: " + args.batch);
  const bool directory = std::filesystem::is_directory(args.batch);
  JobArgs job = args.job;
  job.hf_model_dir = args.init_hf;
  // One file is one step: its samples, one a micro-batch (a later --set
  // data.micro_batch_size takes more at once). A directory is evaluated in
  // steps of data.global_batch_size samples, one a micro-batch too. Without a
  // run file the batches also set the sequence length; the synthetic data's
  // settings are moot here (the images_max default could outgrow a short batch).
  std::vector<std::string> from_batch;
  try {
    int64_t samples = 0, length = 0;
    for (const std::string& file : directory ? batch_files(args.batch) : std::vector<std::string>{args.batch}) {
      const auto [n, s] = batch_file_shape(file);
      samples += n;
      length = std::max(length, s);
    }
    if (!directory) from_batch.push_back("data.global_batch_size=" + std::to_string(samples));
    from_batch.push_back("data.micro_batch_size=1");
    if (job.config.empty()) from_batch.insert(from_batch.end(), {"llm.seq_len=" + std::to_string(length), "data.images_max=0"});
  } catch (const std::exception& e) {
    die(kExitConfigError, "batch: " + args.batch + ": " + error_message(e));
  }
  job.overrides.insert(job.overrides.begin(), from_batch.begin(), from_batch.end());
  job.settings_note = "eval sets --set " + fmt::format("{}", fmt::join(from_batch, " --set ")) + " from the batch " +
                      (directory ? "files" : "file");
  // The batches are checked against the model before any rank starts: a
  // file whole, a directory's headers (each sample when it is read).
  const Preflight check_batch = [&](const RunConfig& config) {
    try {
      if (directory) {
        check_batch_files(args.batch, config, config.data.global_batch_size, "data.global_batch_size");
      } else {
        FileBatch(args.batch, config);
      }
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
