// Every workload piece and run file in workloads/ loads and validates, alone
// and combined; the paper-scale shapes keep their real constraints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/run_config.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;
const fs::path kWorkloads = fs::path(source_tree_path()) / "workloads";

std::vector<fs::path> tomls(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".toml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A run file including one encoder and one LLM piece, written beside the test.
std::string combined_run(const fs::path& encoder, const fs::path& llm) {
  // Unique per process: ctest runs the tests of this file in parallel.
  const fs::path file = fs::path(::testing::TempDir()) / (encoder.stem().string() + "__" + llm.stem().string() +
                                                          "_" + std::to_string(getpid()) + ".toml");
  std::ofstream(file) << "include = [\"" << encoder.string() << "\", \"" << llm.string() << "\"]\n";
  return file.string();
}

TEST(Workloads, EveryRunFileLoads) {
  const auto runs = tomls(kWorkloads / "runs");
  ASSERT_FALSE(runs.empty());
  for (const auto& run : runs) EXPECT_NO_THROW(load_run_config(run.string(), {})) << run;
  EXPECT_NO_THROW(load_run_config((kWorkloads / "tiny.toml").string(), {}));
}

TEST(Workloads, EveryEncoderWithEveryLlm) {
  const auto encoders = tomls(kWorkloads / "encoders"), llms = tomls(kWorkloads / "llms");
  ASSERT_GE(encoders.size(), 3u);
  ASSERT_GE(llms.size(), 2u);
  for (const auto& e : encoders) {
    for (const auto& l : llms) {
      const RunConfig c = load_run_config(combined_run(e, l), {"layout.llm.tp=8", "layout.encoder.tp=1",
                                                               "layout.placement=non-colocated"});
      EXPECT_EQ(c.placement.world_size, 9) << e << " + " << l;
    }
  }
}

TEST(Workloads, InternVitHeadsLimitItsTp) {
  const std::string run = combined_run(kWorkloads / "encoders/internvit_6b.toml", kWorkloads / "llms/llama3_8b.toml");
  try {
    load_run_config(run, {"layout.llm.tp=8"});  // uniform: the encoder inherits tp 8
    FAIL() << "25 heads cannot be split 8 ways";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "encoder.heads");
  }
  // 5 divides the heads, but the projector, sharded on the encoder's TP group,
  // cannot cut the LLM's hidden size 4096 five ways.
  try {
    load_run_config(run, {"layout.placement=non-colocated", "layout.encoder.tp=5", "layout.llm.tp=8"});
    FAIL() << "the projector cannot be split 5 ways";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "llm.hidden");
  }
  EXPECT_NO_THROW(load_run_config(run, {"layout.placement=non-colocated", "layout.encoder.dp=4", "layout.llm.tp=8"}));
}

}  // namespace
}  // namespace hetpar
