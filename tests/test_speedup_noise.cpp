// The sweep report's speed-up intervals (sweep/speedup_noise) on crafted runs
// (real files: each run's steps.jsonl and the records), with known medians.
#include <gtest/gtest.h>

#include <unistd.h>

#include "metrics/significance.hpp"
#include "sweep/speedup_noise.hpp"
#include "tests/crafted_results.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Point {
  std::string id, label, role, placement;
  std::vector<std::vector<double>> runs;  // tokens/s of each run's timed steps
};

// A sweep of one setting ("enc-a"): a baseline and points, each run once per
// round (ids id, idr2, ...), every point's run of round k measured against
// the baseline's run of round k, as `hetpar sweep --repeat` writes them.
struct CraftedSweep {
  fs::path dir;
  std::vector<json> records;
};

CraftedSweep write_sweep(const std::string& name, const std::vector<Point>& points) {
  CraftedSweep s{fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid())), {}};
  fs::remove_all(s.dir);
  const std::string baseline_id = points.front().id;
  for (const Point& p : points) {
    for (size_t k = 0; k < p.runs.size(); ++k) {
      const std::string round = k == 0 ? "" : "r" + std::to_string(k + 1);
      json r = crafted::write_run(s.dir, p.id + round, p.label, p.runs[k]);
      r["role"] = p.role;
      r["placement"] = p.placement;
      r["axes"] = {{"encoder", "enc-a"}, {"placement", p.placement}};
      if (p.role == "point") r["baseline_id"] = baseline_id + round;
      s.records.push_back(r);
    }
  }
  crafted::write_records(s.dir, s.records);
  return s;
}

const SpeedupNoise& find(const std::vector<SpeedupNoise>& rows, const std::string& start) {
  for (const SpeedupNoise& r : rows) {
    if (r.comparison.rfind(start, 0) == 0) return r;
  }
  ADD_FAILURE() << "no comparison starting with " << start;
  return rows.front();
}

TEST(SpeedupNoise, AClearSpeedUpOverRunsIsFaster) {
  const CraftedSweep s = write_sweep(
      "clear", {{"b001", "baseline of enc-a", "baseline", "uniform",
                 {crafted::around(1000, 0.03, 6), crafted::around(1020, 0.03, 6), crafted::around(990, 0.03, 6)}},
                {"p001", "enc-a / colocated", "point", "colocated",
                 {crafted::around(1200, 0.03, 6), crafted::around(1180, 0.03, 6), crafted::around(1230, 0.03, 6)}}});
  const std::vector<SpeedupNoise> rows = sweep_speedup_noise(s.records, s.dir.string());
  ASSERT_EQ(rows.size(), 1u);
  const SpeedupNoise& r = rows[0];
  EXPECT_EQ(r.problem, "");
  EXPECT_EQ(r.point_runs, 3);
  EXPECT_EQ(r.reference_runs, 3);
  EXPECT_NEAR(r.ratio, 1200.0 / 1000.0, 0.03);
  EXPECT_GT(r.low, 1.1);
  EXPECT_LT(r.high, 1.3);
  EXPECT_EQ(r.verdict(), "faster");
  const std::string section = speedup_noise_section(rows);
  EXPECT_NE(section.find("| enc-a / colocated over its baseline |"), std::string::npos) << section;
  EXPECT_NE(section.find("| faster |"), std::string::npos) << section;
}

// Each run's steps are tight, but the runs move as a whole (as a busy
// machine's do): the point's runs sit among the baseline's. Over runs the
// interval holds 1; one run a side, by its steps, would not.
TEST(SpeedupNoise, RunToRunShiftsAreWithinNoise) {
  const std::vector<std::vector<double>> base = {crafted::around(1000, 0.01, 6), crafted::around(1200, 0.01, 6),
                                                 crafted::around(850, 0.01, 6)};
  const std::vector<std::vector<double>> point = {crafted::around(1100, 0.01, 6), crafted::around(900, 0.01, 6),
                                                  crafted::around(1180, 0.01, 6)};
  const CraftedSweep s = write_sweep("shifts", {{"b001", "baseline of enc-a", "baseline", "uniform", base},
                                                {"p001", "enc-a / colocated", "point", "colocated", point}});
  const SpeedupNoise r = sweep_speedup_noise(s.records, s.dir.string()).at(0);
  ASSERT_EQ(r.problem, "");
  EXPECT_LT(r.low, 1.0);
  EXPECT_GT(r.high, 1.0);
  EXPECT_EQ(r.verdict(), "within noise");
  // The contrast: the first round alone, its steps bootstrapped, would call the point 10 % faster.
  const RatioInterval first_round = bootstrap_median_ratio({base[0]}, {point[0]});
  EXPECT_GT(first_round.low, 1.05);
}

TEST(SpeedupNoise, PlacementsOfASettingAreComparedAndSingleRunsGetNoInterval) {
  const CraftedSweep s = write_sweep(
      "placements", {{"b001", "baseline of enc-a", "baseline", "uniform",
                      {crafted::around(1000, 0.02, 6), crafted::around(1010, 0.02, 6)}},
                     {"p001", "enc-a / colocated", "point", "colocated",
                      {crafted::around(1100, 0.02, 6), crafted::around(1110, 0.02, 6)}},
                     {"p002", "enc-a / non-colocated", "point", "non-colocated",
                      {crafted::around(900, 0.02, 6), crafted::around(890, 0.02, 6)}}});
  const std::vector<SpeedupNoise> rows = sweep_speedup_noise(s.records, s.dir.string());
  ASSERT_EQ(rows.size(), 3u);
  const SpeedupNoise& placements = find(rows, "enc-a: non-colocated over colocated");
  EXPECT_NEAR(placements.ratio, 900.0 / 1100.0, 0.03);
  EXPECT_EQ(placements.verdict(), "slower");
  EXPECT_EQ(find(rows, "enc-a / non-colocated over").verdict(), "slower");

  // The first round alone: one run a side, no interval anywhere, and the section says so.
  std::vector<json> first_round;
  for (const json& r : s.records) {
    if (r["run_id"].get<std::string>().find('r') == std::string::npos) first_round.push_back(r);
  }
  const std::vector<SpeedupNoise> single = sweep_speedup_noise(first_round, s.dir.string());
  ASSERT_EQ(single.size(), 3u);
  for (const SpeedupNoise& r : single) {
    EXPECT_EQ(r.problem, "fewer than two runs a side") << r.comparison;
    EXPECT_EQ(r.verdict(), "-");
  }
  const std::string section = speedup_noise_section(single);
  EXPECT_NE(section.find("ran once here"), std::string::npos) << section;
  EXPECT_EQ(section.find("| comparison |"), std::string::npos) << section;
}

TEST(SpeedupNoise, AMissingRunDirectoryIsAProblemNotANumber) {
  const CraftedSweep s = write_sweep(
      "missing", {{"b001", "baseline of enc-a", "baseline", "uniform",
                   {crafted::around(1000, 0.02, 6), crafted::around(1000, 0.02, 6)}},
                  {"p001", "enc-a / colocated", "point", "colocated",
                   {crafted::around(1100, 0.02, 6), crafted::around(1100, 0.02, 6)}}});
  fs::remove_all(s.dir / "runs" / "p001r2");
  const SpeedupNoise r = sweep_speedup_noise(s.records, s.dir.string()).at(0);
  EXPECT_NE(r.problem.find("p001r2"), std::string::npos) << r.problem;
  EXPECT_EQ(r.verdict(), "-");
  const std::string section = speedup_noise_section({r});
  EXPECT_NE(section.find("No interval:"), std::string::npos) << section;
  EXPECT_NE(section.find("p001r2"), std::string::npos) << section;
}

}  // namespace
}  // namespace hetpar
