// `hetpar eval RUN.toml --init-hf DIR --batch FILE.safetensors`.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/job_command.hpp"

namespace hetpar {

struct EvalArgs {
  JobArgs job;
  std::string init_hf;
  std::string batch;
};

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args);
int run_eval(const EvalArgs& args);

}  // namespace hetpar
