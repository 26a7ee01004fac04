// `hetpar calibrate [--out PROFILE.json] [--ranks N] [--quick] [--device D]
// [--base PROFILE]`: measures this machine's compute and collective
// primitives (plan/calibration.hpp) and writes them, with where and when they
// were measured, as one profile. On a GPU: compute in bf16 on GPU 0,
// collectives over NCCL on the node's GPUs; with one GPU the collectives (and
// the inter-node figures) come from --base, a published profile.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace hetpar {

struct CalibrateArgs {
  std::string out = "results/profile.json";
  int ranks = 0;            // ranks for the collectives; 0: 2 per core, 2 to 8
  bool quick = false;       // a small grid, for tests
  std::string device = "auto";  // auto | cpu | cuda
  std::string base;         // a GPU profile whose unmeasured sections the GPU calibration keeps
  std::string rank_output;  // set by calibrate itself on the ranks it launches
};

CLI::App* add_calibrate_command(CLI::App& app, CalibrateArgs& args);
int run_calibrate(const CalibrateArgs& args);

}  // namespace hetpar
