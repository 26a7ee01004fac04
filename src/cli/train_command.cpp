#include "cli/train_command.hpp"

#include <filesystem>

#include "checkpoint/checkpoint_manifest.hpp"
#include "data/data_sources.hpp"
#include "metrics/run_summary.hpp"
#include "train/run_dir.hpp"
#include "util/durable_file.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"
#include "util/output_dir.hpp"

namespace hetpar {
namespace {

// Before any rank starts: RUN_DIR has a complete, intact checkpoint of the same model.
void check_resume(const std::string& run_dir, const RunConfig& config) {
  try {
    const std::optional<std::string> checkpoint = latest_complete_checkpoint(run_dir);
    if (!checkpoint) {
      throw CheckpointError("no complete checkpoint under " + checkpoints_root(run_dir) +
                            " (run.checkpoint_every writes them)");
    }
    const CheckpointManifest manifest = read_manifest(*checkpoint);
    verify_checkpoint_files(*checkpoint, manifest);
    check_resumable(load_run_config(*checkpoint + "/config.toml", {}), config, manifest.step);
    try {
      steps_through(run_dir, manifest.step);  // what the resumed run keeps of the earlier steps
    } catch (const std::runtime_error& e) {
      throw CheckpointError(e.what());
    }
  } catch (const CheckpointError& e) {
    throw ConfigError("command line", "--resume", e.what());
  } catch (const ConfigError& e) {
    throw ConfigError("command line", "--resume", std::string("the checkpoint's config.toml: ") + e.what());
  }
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainArgs& args) {
  CLI::App* cmd = app.add_subcommand("train", "Train one run described by a TOML run file");
  cmd->add_option("--out", args.outputs.out_dir, "output directory (default: results/runs/<run.name>)");
  cmd->add_option("--init-hf", args.outputs.init_hf,
                  "start from this transformers LLaVA directory (config.json + model.safetensors)");
  cmd->add_option("--save-hf", args.outputs.save_hf,
                  "at the end, write the model here as a transformers LlavaForConditionalGeneration directory");
  cmd->add_option("--resume", args.outputs.resume,
                  "continue the run in this directory from its latest complete checkpoint (run.checkpoint_every), "
                  "under this run file's layout; results go on in that directory unless --out says otherwise");
  add_job_options(*cmd, args.job);
  return cmd;
}

int run_train(const TrainArgs& args) {
  if (!args.outputs.resume.empty() && !args.outputs.init_hf.empty()) {
    // Before the transformers directory is read: the combination is the problem, whatever the directory holds.
    const ConfigError both("command line", "--init-hf",
                           "not with --resume: the resumed run's weights are its checkpoint's (--init-hf starts a new run)");
    die(kExitConfigError, std::string("config: ") + both.what());  // as run_job says a ConfigError
  }
  std::vector<std::string> rank_args;
  for (const auto& [flag, value] : {std::pair{"--out", args.outputs.out_dir}, std::pair{"--init-hf", args.outputs.init_hf},
                                    std::pair{"--save-hf", args.outputs.save_hf}, std::pair{"--resume", args.outputs.resume}}) {
    if (!value.empty()) rank_args.insert(rank_args.end(), {flag, value});
  }
  auto outputs_of = [&](const RunConfig& config) {
    TrainOutputs outputs = args.outputs;
    if (outputs.out_dir.empty()) outputs.out_dir = outputs.resume.empty() ? "results/runs/" + config.run.name : outputs.resume;
    return outputs;
  };
  // Where results go is checked, and claimed, before the first step, not found unusable after the last.
  RunDirClaim run_dir;  // held until every rank has ended
  const Preflight prepare_outputs = [&](const RunConfig& config) {
    const TrainOutputs outputs = outputs_of(config);
    check_data_files(config);
    if (!outputs.resume.empty()) check_resume(outputs.resume, config);
    if (!outputs.save_hf.empty()) {
      if (const std::string why = output_dir_problem(outputs.save_hf, hf_export_outputs()); !why.empty()) {
        throw ConfigError("command line", "--save-hf", why);
      }
    }
    try {
      run_dir = RunDirClaim(outputs.out_dir, !outputs.resume.empty() && same_directory(outputs.out_dir, outputs.resume));
    } catch (const RunDirError& e) {
      throw ConfigError("command line", "--out", e.what());
    }
    if (!outputs.save_hf.empty()) {
      try {
        mark_output_dir(outputs.save_hf, hf_export_outputs());
        remove_stale_temporaries(outputs.save_hf);  // an export killed mid-write left them
      } catch (const FileError& e) {
        throw ConfigError("command line", "--save-hf", e.what());
      }
    }
    // Every check passed: only now does the earlier run's output go.
    try {
      run_dir.clear_earlier_outputs();
    } catch (const RunDirError& e) {
      throw ConfigError("command line", "--out", e.what());
    }
  };
  JobArgs job = args.job;
  job.hf_model_dir = args.outputs.init_hf;
  return run_job("train", job, rank_args, [&](const RunConfig& config, const LaunchEnv& env) {
    // Every rank measures the same headers: the FLOP count and the colocated
    // pipeline's stage costs count the files' images alike.
    return run_train_job(with_file_image_counts(config), env, outputs_of(config));
  }, prepare_outputs);
}

}  // namespace hetpar
