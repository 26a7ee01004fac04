// Transformers checkpoints under every layout, through the real binary. A
// model exported by one rank loads under pipeline, context and tensor
// parallelism, colocated and not: the first step's loss is the one-rank run's
// (1e-6 relative) and not the fresh model's. Exported again under that layout
// after one step at a learning rate of 1e-30, it holds the loaded weights to
// 1e-20 absolute (a misplaced tensor or shard is off by ~1e-2), as one file or
// as shards named by an index. A second export replaces the first whatever
// the two layouts; a tensor missing from one stage's shard is named by the
// rank that needs it, and the job ends.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "interop/hf_export.hpp"
#include "interop/hf_model_config.hpp"
#include "io/safetensors.hpp"
#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;

const std::string kHetpar = hetpar_binary();
const std::string kTiny = source_tree_path("/workloads/tiny.toml");
// One step that leaves the weights as loaded (to far below any tensor's scale).
const std::string kStill = " --set run.steps=1 --set optim.lr=1e-30 --set optim.min_lr=0";

std::string scratch(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/hf_export_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  return dir;
}

double first_loss(const std::string& run_dir) {
  std::ifstream in(run_dir + "/steps.jsonl");
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line).at("loss").get<double>();
}

// Every tensor of an export, whichever file holds it.
std::map<std::string, at::Tensor> exported(const std::string& dir) {
  std::map<std::string, at::Tensor> all;
  for (const std::string& file : hf_weight_files(dir)) all.merge(read_safetensors(file));
  return all;
}

// The weight files of an export directory, sorted.
std::vector<std::string> weight_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("model", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The largest absolute difference between two exports' tensors; fails the
// test when they do not hold the same names and shapes.
double largest_difference(const std::string& a, const std::string& b) {
  const auto x = exported(a), y = exported(b);
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (const auto& [name, tensor] : x) {
    const auto it = y.find(name);
    if (it == y.end() || it->second.sizes() != tensor.sizes()) {
      ADD_FAILURE() << name << " missing or reshaped in " << b;
      return INFINITY;
    }
    worst = std::max(worst, (tensor - it->second).abs().max().item<double>());
  }
  return worst;
}

// A one-rank model trained 2 steps and exported (not the seed's weights), and
// the first loss of a one-rank run that loads it; once per test process.
struct Reference {
  std::string model, run;
  double fresh_loss = 0, loaded_loss = 0;
};
const Reference& reference() {
  static const Reference r = [] {
    Reference made{scratch("reference_model"), scratch("reference_run")};
    const std::string trained = scratch("reference_trained");
    auto [code, out] = run_command(kHetpar + " train " + kTiny + " --set run.steps=2 --out " + trained +
                                   " --save-hf " + made.model);
    EXPECT_EQ(code, 0) << out;
    made.fresh_loss = first_loss(trained);
    std::tie(code, out) = run_command(kHetpar + " train " + kTiny + kStill + " --init-hf " + made.model + " --out " +
                                      made.run);
    EXPECT_EQ(code, 0) << out;
    made.loaded_loss = first_loss(made.run);
    return made;
  }();
  return r;
}

struct LayoutCase {
  const char* name;
  const char* sets;
  int files;  // weight files of its export (1: model.safetensors)
};
void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

class HfUnderLayout : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(HfUnderLayout, LoadsAndExportsTheSameWeights) {
  const Reference& ref = reference();
  ASSERT_NE(ref.fresh_loss, ref.loaded_loss) << "the reference export does not change the first loss";
  const std::string run = scratch(std::string(GetParam().name) + "_run");
  const std::string model = scratch(std::string(GetParam().name) + "_model");
  const auto [code, out] = run_command(kHetpar + " train " + kTiny + kStill + " " + GetParam().sets + " --init-hf " +
                                       ref.model + " --out " + run + " --save-hf " + model);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NEAR(first_loss(run), ref.loaded_loss, 1e-6 * ref.loaded_loss) << out;
  EXPECT_LE(largest_difference(ref.model, model), 1e-20);
  const std::vector<std::string> files = weight_files(model);
  if (GetParam().files == 1) {
    EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
  } else {
    ASSERT_EQ(static_cast<int>(files.size()), GetParam().files + 1) << fmt::format("{}", fmt::join(files, " "));
    EXPECT_EQ(files.back(), "model.safetensors.index.json");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, HfUnderLayout,
    ::testing::Values(
        LayoutCase{"uniform_pp2", "--set layout.llm.pp=2", 3},
        LayoutCase{"colocated_pp2_cp2",
                   "--set layout.placement=colocated --set layout.encoder.dp=4 --set layout.llm.pp=2 "
                   "--set layout.llm.cp=2",
                   3},
        LayoutCase{"noncolocated_pp2_pp2",
                   "--set layout.placement=non-colocated --set layout.encoder.pp=2 --set layout.encoder.dp=1 "
                   "--set layout.llm.pp=2",
                   4},
        LayoutCase{"noncolocated_tp2_tp2",
                   "--set layout.placement=non-colocated --set layout.encoder.tp=2 --set layout.encoder.dp=1 "
                   "--set layout.llm.tp=2",
                   2},
        LayoutCase{"colocated_tp2", "--set layout.placement=colocated --set layout.encoder.dp=2 --set layout.llm.tp=2",
                   1}),
    [](const auto& info) { return std::string(info.param.name); });

const std::string kNonColocatedPipeline =
    " --set layout.placement=non-colocated --set layout.encoder.pp=2 --set layout.encoder.dp=1 --set layout.llm.pp=2";

// Whichever layout wrote the earlier export, the new one alone is left: a
// reader never mixes a stale model.safetensors with new shards, or the reverse.
TEST(HfExport, ASecondExportReplacesTheFirstWhateverTheLayouts) {
  const Reference& ref = reference();
  const std::string model = scratch("replaced"), run = scratch("replaced_run");
  const std::vector<std::pair<std::string, size_t>> exports = {{kNonColocatedPipeline, 5}, {"", 1}, {kNonColocatedPipeline, 5}};
  for (const auto& [sets, files] : exports) {
    fs::remove_all(run);
    const auto [code, out] = run_command(kHetpar + " train " + kTiny + kStill + sets + " --init-hf " + ref.model +
                                         " --out " + run + " --save-hf " + model);
    ASSERT_EQ(code, 0) << out;
    EXPECT_EQ(weight_files(model).size(), files) << sets;
    EXPECT_LE(largest_difference(ref.model, model), 1e-20) << sets;
  }
}

// A tensor gone from the last LLM stage's shard: that stage's ranks name it,
// the others say another rank's part is missing, and the job ends (no rank
// waits for a peer that left).
TEST(HfExport, ATensorMissingFromOneStagesShardIsNamed) {
  const Reference& ref = reference();
  const std::string model = scratch("broken"), run = scratch("broken_run");
  auto [code, out] = run_command(kHetpar + " train " + kTiny + kStill + kNonColocatedPipeline + " --init-hf " +
                                 ref.model + " --out " + run + " --save-hf " + model);
  ASSERT_EQ(code, 0) << out;
  const std::string last = model + "/model-00004-of-00004.safetensors";
  auto tensors = read_safetensors(last);
  ASSERT_EQ(tensors.erase("lm_head.weight"), 1u);
  write_safetensors(last, {tensors.begin(), tensors.end()});
  fs::remove_all(run);
  std::tie(code, out) = run_command(kHetpar + " train " + kTiny + kStill + kNonColocatedPipeline +
                                    " --set runtime.timeout_s=20 --init-hf " + model + " --out " + run);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("no tensor lm_head.weight"), std::string::npos) << out;
}

// Who writes which file: one file where one rank leads both whole modules,
// else one per stage of each module, the encoder's first, each by the
// stage's rank at TP, CP and DP coordinate 0.
TEST(HfExportFiles, OneFilePerModuleStageUnlessOneRankLeadsBothWholeModules) {
  const HfExportFiles colocated = hf_export_files(RankGrid({.tp = 2, .dp = 2}, 0), RankGrid({.tp = 4}, 0));
  EXPECT_EQ(colocated.writers, std::vector<int>{0});
  EXPECT_EQ(colocated.name(0), "model.safetensors");

  // Non-colocated: encoder tp2 dp2 on ranks 0-3; LLM tp2 cp2 pp3 dp1 on ranks 4-15.
  const HfExportFiles apart =
      hf_export_files(RankGrid({.tp = 2, .dp = 2}, 0), RankGrid({.tp = 2, .cp = 2, .pp = 3}, 4));
  EXPECT_EQ(apart.writers, (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(apart.encoder_first, 0);
  EXPECT_EQ(apart.llm_first, 1);
  EXPECT_EQ(apart.name(0), "model-00001-of-00004.safetensors");
  EXPECT_EQ(apart.name(3), "model-00004-of-00004.safetensors");

  // Uniform LLM pp2 dp2: the encoder on the first stage's ranks, written apart from the LLM's stage 0.
  const HfExportFiles pipelined = hf_export_files(RankGrid({.dp = 2}, 0), RankGrid({.pp = 2, .dp = 2}, 0));
  EXPECT_EQ(pipelined.writers, (std::vector<int>{0, 0, 2}));
  EXPECT_EQ(pipelined.llm_first, 1);
}

}  // namespace
}  // namespace hetpar::test
