// `hetpar compare --results` end to end with the real binary, on crafted
// sweeps (results.jsonl and each run's steps.jsonl, nothing trained): noise
// beyond the threshold is not a regression, a real slowdown is, and a real
// change under the threshold is not; and `hetpar sweep --repeat` on a real
// (tiny) sweep.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "tests/crafted_results.hpp"
#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;

// OLD and NEW sweeps of one point (label "enc / colocated"), `repeats` runs a
// side, the run of repeat k at `level`^k of the given tokens/s per step.
struct Sweeps {
  std::string old_dir, new_dir;
};

Sweeps write_sweeps(const std::string& name, const std::vector<double>& old_tokens,
                    const std::vector<double>& new_tokens, int repeats = 1, double level = 1.0) {
  const fs::path dir = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<nlohmann::json> olds, news;
  double scale = 1.0;
  for (int k = 1; k <= repeats; ++k, scale *= level) {
    const std::string id = k == 1 ? "p001" : "p001r" + std::to_string(k);
    std::vector<double> o = old_tokens, n = new_tokens;
    for (double& v : o) v *= scale;
    for (double& v : n) v *= scale;
    olds.push_back(crafted::write_run(dir / "old", id, "enc / colocated", o));
    news.push_back(crafted::write_run(dir / "new", id, "enc / colocated", n));
  }
  crafted::write_records(dir / "old", olds);
  crafted::write_records(dir / "new", news);
  return {(dir / "old").string(), (dir / "new").string()};
}

std::pair<int, std::string> compare(const Sweeps& s, const std::string& extra = "") {
  return run_command(hetpar_binary() + " compare --results " + s.old_dir + " " + s.new_dir + extra);
}

TEST(RegressionCheck, NoiseBeyondTheThresholdIsNoRegression) {
  // One distribution on both sides; the medians differ by 6.5%.
  const auto [code, output] = compare(write_sweeps("noise", crafted::kNoisyOld, crafted::kNoisyNew));
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("-6.5% ["), std::string::npos) << output;
  EXPECT_NE(output.find("ok (drop within noise)"), std::string::npos) << output;
  EXPECT_NE(output.find("1 points compared, 0 regressed beyond 5%"), std::string::npos) << output;
}

TEST(RegressionCheck, ARealSlowdownIsCaught) {
  const Sweeps s = write_sweeps("slowdown", crafted::around(1000, 0.02, 10), crafted::around(800, 0.02, 10), 3, 1.01);
  const auto [code, output] = compare(s);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("-20.0% ["), std::string::npos) << output;
  EXPECT_NE(output.find("REGRESSED"), std::string::npos) << output;
  EXPECT_NE(output.find("repeats pooled: up to 3 runs a point in OLD, 3 in NEW"), std::string::npos) << output;
  EXPECT_NE(output.find("1 points compared, 1 regressed beyond 5%"), std::string::npos) << output;
  // A threshold above the drop lets it pass, however significant.
  EXPECT_EQ(compare(s, " --threshold 25%").first, 0);
}

TEST(RegressionCheck, ASignificantChangeUnderTheThresholdIsNoRegression) {
  const Sweeps s = write_sweeps("small", crafted::around(1000, 0.005, 12), crafted::around(970, 0.005, 12));
  const auto [code, output] = compare(s);
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("-3.0% ["), std::string::npos) << output;
  EXPECT_NE(output.find("ok (significant drop under 5%)"), std::string::npos) << output;
  const auto [strict, strict_output] = compare(s, " --threshold 2%");
  EXPECT_EQ(strict, 1) << strict_output;
}

TEST(RegressionCheck, WithoutItsRunsAPointIsJudgedOnItsMedians) {
  const Sweeps s = write_sweeps("no_runs", crafted::around(1000, 0.005, 12), crafted::around(800, 0.005, 12));
  fs::remove_all(fs::path(s.new_dir) / "runs");
  const auto [code, output] = compare(s);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("REGRESSED (no per-step samples: not tested for significance)"), std::string::npos) << output;
  EXPECT_NE(output.find("not tested for significance: enc / colocated: NEW: cannot read"), std::string::npos) << output;
}


// A real sweep measured twice: raising --repeat on a finished sweep runs only
// the new round; the report pools the repeats and gives the speed-ups an
// interval; the sweep against itself is no regression.
TEST(RegressionCheck, RepeatsOfARealSweep) {
  const std::string out = ::testing::TempDir() + "/repeat_sweep_" + std::to_string(getpid());
  fs::remove_all(out);
  const std::string sweep = hetpar_binary() + " sweep " + test_data_path("/sweeps/two_points.toml") +
                            " --no-plots --set run.steps=4 --out " + out;
  auto [code, output] = run_command(sweep);
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("ran once here: the speed-ups above are single measurements"), std::string::npos) << output;
  std::tie(code, output) = run_command(sweep + " --repeat 2");
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("resuming: 3 runs already finished"), std::string::npos) << output;
  std::vector<std::string> ids;
  std::ifstream results(out + "/results.jsonl");
  for (std::string line; std::getline(results, line);) {
    const auto record = nlohmann::json::parse(line);
    ids.push_back(record["run_id"]);
    EXPECT_EQ(record["status"], "ok") << line;
    if (record["run_id"] == "p001r2") EXPECT_EQ(record["baseline_id"], "b001r2");
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"b001", "p001", "p002", "b001r2", "p001r2", "p002r2"}));
  EXPECT_NE(output.find("| p001 (x2) | colocated |"), std::string::npos) << output;
  EXPECT_NE(output.find("| b001 (x2) | baseline of colocated |"), std::string::npos) << output;
  EXPECT_NE(output.find("median of its runs' medians"), std::string::npos) << output;
  // Two runs a side: each point over its baseline, and the placements over one another, with an interval.
  EXPECT_NE(output.find("| comparison | tokens/s ratio | 95% interval |"), std::string::npos) << output;
  EXPECT_NE(output.find("| colocated over its baseline |"), std::string::npos) << output;
  EXPECT_NE(output.find(": non-colocated over colocated |"), std::string::npos) << output;
  EXPECT_NE(output.find("| 2 / 2 |"), std::string::npos) << output;

  std::tie(code, output) = run_command(hetpar_binary() + " compare --results " + out + " " + out);
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("3 points compared, 0 regressed"), std::string::npos) << output;
  EXPECT_NE(output.find("repeats pooled: up to 2 runs a point in OLD, 2 in NEW"), std::string::npos) << output;
  EXPECT_EQ(output.find("not tested"), std::string::npos) << output;  // 2 runs x 3 timed steps a side
}

}  // namespace
}  // namespace hetpar::test
