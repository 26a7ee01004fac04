// `hetpar calibrate` through the real binary: a quick profile holds every
// section with finite positive rates (whole layers and shared cores among
// them), where and when it was measured, and
// each collective per group size with its alpha-beta fit; bad options are
// refused before anything is measured.
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;

bool positive(const nlohmann::json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0; }

TEST(Calibrate, QuickProfileHasEverySection) {
  const std::string dir = ::testing::TempDir() + "/calibrate_" + std::to_string(getpid());
  fs::remove_all(dir);
  const auto [code, output] = run_command(hetpar_binary() + " calibrate --quick --ranks 4 --out " + dir +
                                          "/profile.json");
  ASSERT_EQ(code, 0) << output;
  std::ifstream in(dir + "/profile.json");
  const nlohmann::json p = nlohmann::json::parse(in);
  EXPECT_EQ(p["format"], "hetpar-profile/1");
  for (const char* key : {"device", "commit", "torch_version", "date"}) EXPECT_TRUE(p["measured"][key].is_string()) << key;
  EXPECT_EQ(p["measured"]["ranks"], 4);
  ASSERT_EQ(p["gemm"].size(), 8u);  // {64, 256}^3
  for (const auto& g : p["gemm"]) {
    EXPECT_TRUE(positive(g["flops_per_second"])) << g;
    EXPECT_TRUE(positive(g["backward_flops_per_second"])) << g;
  }
  // One whole layer of each module (the quick grid's one shape), forward and backward.
  ASSERT_EQ(p["layers"].size(), 2u);
  std::set<std::string> modules;
  for (const auto& l : p["layers"]) {
    modules.insert(l["module"].get<std::string>());
    EXPECT_TRUE(positive(l["forward_seconds"]) && positive(l["backward_seconds"])) << l;
    EXPECT_EQ(l["stack_depth"], 2) << l;  // distinct layers in sequence, as a micro-batch runs them
  }
  EXPECT_EQ(modules, (std::set<std::string>{"llm", "encoder"}));
  // 4 ranks on this machine's cores: the same compute alone and on every rank at once.
  const auto& shared = p["shared_cores"];
  EXPECT_EQ(shared["ranks"], 4);
  EXPECT_TRUE(positive(shared["alone_seconds"]) && positive(shared["all_ranks_seconds"])) << shared;
  EXPECT_TRUE(positive(shared["efficiency"]) && shared["efficiency"].get<double>() <= 1.0) << shared;
  ASSERT_EQ(p["attention"].size(), 6u);  // 2 sequences x (causal, bidirectional, causal grouped-query)
  int grouped = 0;
  for (const auto& a : p["attention"]) grouped += a["kv_heads"] != a["heads"];
  EXPECT_EQ(grouped, 2);
  for (const auto& a : p["attention"]) {
    EXPECT_TRUE(positive(a["forward_seconds"])) << a;
    EXPECT_GE(a["backward_seconds"].get<double>(), 0.0) << a;
  }
  ASSERT_EQ(p["memory_bound"].size(), 4u);
  for (const auto& m : p["memory_bound"]) EXPECT_TRUE(positive(m["bytes_per_second"])) << m;
  // Host memory shared by the ranks, and a rank's own before any tensor: a
  // process with the runtime loaded holds hundreds of MiB, far less than the host.
  const auto& memory = p["memory"];
  EXPECT_TRUE(memory["shared_by_all_ranks"].get<bool>());
  EXPECT_GT(memory["reserved_bytes"].get<double>(), 50.0 * (1 << 20)) << memory;
  EXPECT_LT(memory["reserved_bytes"].get<double>(), memory["bytes_per_device"].get<double>() / 4) << memory;
  std::set<std::pair<std::string, int>> seen;
  for (const auto& c : p["collectives"]) {
    seen.insert({c["op"].get<std::string>(), c["group_size"].get<int>()});
    ASSERT_EQ(c["points"].size(), 2u) << c;
    EXPECT_LT(c["points"][0]["bytes"].get<double>(), c["points"][1]["bytes"].get<double>()) << c;
    for (const auto& point : c["points"]) EXPECT_TRUE(positive(point["seconds"])) << c;
    if (!c.contains("fit_error")) {
      EXPECT_TRUE(positive(c["bytes_per_second"])) << c;
      EXPECT_GE(c["latency_seconds"].get<double>(), 0.0) << c;
    }
  }
  for (int g : {2, 4}) {
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all_v"}) {
      EXPECT_TRUE(seen.count({op, g})) << op << " over " << g;
    }
  }
  EXPECT_TRUE(seen.count({"send_recv", 2}));
  EXPECT_FALSE(fs::exists(dir + "/profile.json.ranks.tmp")) << "the ranks' part was left behind";
  fs::remove_all(dir);
}

TEST(Calibrate, BadOptionsAreRefusedBeforeMeasuring) {
  const std::string bin = hetpar_binary() + " calibrate --quick ";
  const std::string dir = ::testing::TempDir() + "/calibrate_bad_" + std::to_string(getpid());
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--ranks 1 --out " + dir + "/p.json", "--ranks"},
      {"--ranks 1000 --out " + dir + "/p.json", "more than 4 ranks per core"},
      {"--out " + dir, "names a directory"},
      {"--out /proc/hetpar_no/p.json", "--out"},
      {"--device gpu --out " + dir + "/p.json", "--device"},
      {"--device cpu --base " + source_tree_path("/profiles/h200_dgx.json") + " --out " + dir + "/p.json",
       "only a GPU calibration"},
  };
  // Where no GPU is visible (this test's machines), asking for one is refused.
  if (!fs::exists("/dev/nvidia0")) {
    const auto [code, output] = run_command(bin + "--device cuda --out " + dir + "/p.json");
    EXPECT_EQ(code, 2) << output;
    EXPECT_NE(output.find("no CUDA device is visible"), std::string::npos) << output;
  }
  for (const auto& [args, message] : cases) {
    const auto [code, output] = run_command(bin + args);
    EXPECT_EQ(code, 2) << args << "\n" << output;
    EXPECT_NE(output.find(message), std::string::npos) << args << "\n" << output;
    EXPECT_EQ(output.find("calibrate: GEMM"), std::string::npos) << "measured before refusing: " << args;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hetpar::test
