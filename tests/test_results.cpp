// Sweep results: reading results.jsonl, its CSV view, the timed steps of its
// runs, the repeats of a point pooled, and the regression check between two
// sets of results.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "crafted_results.hpp"
#include "metrics/point_repeats.hpp"
#include "metrics/results_compare.hpp"
#include "metrics/results_csv.hpp"
#include "metrics/step_samples.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A per-process directory, so parallel test runs do not share files.
fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("results_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }

std::string join(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
  return out;
}

// The CSV line of a record: `cells` by column name, every other column empty.
std::string row(const std::vector<std::string>& header, const std::map<std::string, std::string>& cells) {
  std::vector<std::string> out;
  for (const std::string& h : header) out.push_back(cells.contains(h) ? cells.at(h) : "");
  return join(out);
}

const std::vector<std::string> kFixedHeader = {
    "run_id", "role", "baseline_id", "status", "error", "diverged_step", "label",
    "placement", "layout_encoder", "layout_llm", "encoder_name", "world_size",
    "flops_per_step", "step_seconds_median", "step_seconds_p10", "step_seconds_p90",
    "predicted_step_seconds", "prediction_error",
    "tflops_per_gpu", "mfu", "tokens_per_second", "image_tokens_per_second", "samples_per_second",
    "peak_memory_mib", "predicted_peak_memory_mib", "memory_prediction_error",
    "peak_tensor_mib", "predicted_tensor_mib", "tensor_prediction_error", "speedup_tflops", "speedup_tokens", "loss_max_rel_diff", "eval_loss_max_rel_diff", "loss_parity_ok",
    "run_dir", "commit", "hetpar_version", "torch_version", "device", "device_count",
    "backend", "ranks_per_core", "seed", "workload"};

std::vector<json> csv_records() {
  return {json::parse(R"({"run_id": "a", "role": "point", "status": "ok", "label": "tp=2, say \"hi\"",
                          "error": null, "world_size": 4, "tflops_per_gpu": 412.5, "mfu": 0.1,
                          "step_seconds_median": 0.30000000000000004, "loss_parity_ok": true,
                          "axes": {"placement": "colocated", "tp": "2"},
                          "phases": {"forward": 0.25, "backward": 0.5}})"),
          json::parse(R"({"run_id": "b", "status": "failed", "error": "line 1\nline 2",
                          "flops_per_step": 1.5e15, "seed": 7, "loss_parity_ok": false,
                          "axes": {"tp": "4", "pp": "1"}, "phases": {"optimizer": 0.125}})")};
}

TEST(ResultsCsv, HeaderIsFixedFieldsThenAxesThenPhasesInFirstSeenOrder) {
  std::vector<std::string> expected = kFixedHeader;
  for (const char* extra : {"axis.placement", "axis.tp", "axis.pp", "phase.backward", "phase.forward",
                            "phase.optimizer"}) {
    expected.push_back(extra);
  }
  // A JSON object's keys come back sorted, so "backward" is seen before "forward".
  EXPECT_EQ(results_csv_header(csv_records()), expected);
}

TEST(ResultsCsv, RowsQuoteAndPrintValuesExactly) {
  const std::vector<json> records = csv_records();
  const std::vector<std::string> header = results_csv_header(records);
  const std::string text = results_csv_text(records);
  const std::string expected =
      join(header) + "\n" +
      row(header, {{"run_id", "a"}, {"role", "point"}, {"status", "ok"}, {"label", "\"tp=2, say \"\"hi\"\"\""},
                   {"world_size", "4"}, {"tflops_per_gpu", "412.5"}, {"mfu", "0.1"},
                   {"step_seconds_median", "0.30000000000000004"}, {"loss_parity_ok", "true"},
                   {"axis.placement", "colocated"}, {"axis.tp", "2"}, {"phase.forward", "0.25"},
                   {"phase.backward", "0.5"}}) +
      "\n" +
      row(header, {{"run_id", "b"}, {"status", "failed"}, {"error", "\"line 1\nline 2\""},
                   {"flops_per_step", "1.5e+15"}, {"seed", "7"}, {"loss_parity_ok", "false"}, {"axis.tp", "4"},
                   {"axis.pp", "1"}, {"phase.optimizer", "0.125"}}) +
      "\n";
  EXPECT_EQ(text, expected);
}

TEST(ResultsCsv, WritesTheFile) {
  const fs::path dir = scratch("csv");
  const std::string file = (dir / "results.csv").string();
  write_results_csv(csv_records(), file);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), results_csv_text(csv_records()));
  EXPECT_THROW(write_results_csv(csv_records(), (dir / "no" / "such" / "x.csv").string()), std::runtime_error);
  fs::remove_all(dir);
}

TEST(ReadResults, ReadsTheFileOrItsDirectory) {
  const fs::path dir = scratch("read");
  write_file(dir / "results.jsonl", "{\"run_id\": \"a\"}\n\n{\"run_id\": \"b\", \"axes\": {\"tp\": \"2\"}}\n");
  for (const fs::path& p : {dir, dir / "results.jsonl"}) {
    const std::vector<json> records = read_results(p.string());
    ASSERT_EQ(records.size(), 2u) << p;
    EXPECT_EQ(records[1]["run_id"], "b");
  }
  fs::remove_all(dir);
}

TEST(ReadResults, MissingFileNamesThePath) {
  const std::string missing = (scratch("missing") / "results.jsonl").string();
  try {
    read_results(missing);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST(ReadResults, BadLineNamesFileAndLine) {
  const fs::path dir = scratch("bad");
  write_file(dir / "results.jsonl", "{\"run_id\": \"a\"}\n{\"run_id\": \"b\"}\n{\"run_id\": \n");
  write_file(dir / "array.jsonl", "{}\n[1, 2]\n");
  const auto message = [](const fs::path& p) -> std::string {
    try {
      read_results(p.string());
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no exception";
  };
  EXPECT_NE(message(dir).find("results.jsonl:3:"), std::string::npos) << message(dir);
  EXPECT_NE(message(dir / "array.jsonl").find("array.jsonl:2: not a JSON object"), std::string::npos);
  fs::remove_all(dir);
}

json point(const std::string& label, double tflops, double tokens, const std::string& device = "NVIDIA H100") {
  return {{"status", "ok"}, {"label", label}, {"tflops_per_gpu", tflops}, {"tokens_per_second", tokens},
          {"device", device}, {"commit", "abc123"}};
}

// The table line of a label (its first column), or "" when none.
std::string line_of(const std::string& text, const std::string& label) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label + " ", 0) == 0) return line;
  }
  return "";
}

struct ComparisonSets {
  std::vector<json> old_records, new_records;
};

ComparisonSets comparison_sets() {
  ComparisonSets s;
  s.old_records = {point("same", 100, 1000),     point("slow10", 100, 1000), point("slow3", 100, 1000),
                   point("fast20", 100, 1000),   point("mixed", 100, 1000),  point("gone", 100, 1000),
                   point("broke", 100, 1000),    point("blank", 100, 1000),  point("retried", 100, 1000),
                   {{"status", "invalid"}, {"label", "bad"}}, {{"status", "failed"}, {"label", "healed"}}};
  s.new_records = {point("same", 100, 1000, "NVIDIA H200"),   point("slow10", 90, 1000, "NVIDIA H200"),
                   point("slow3", 97, 1000, "NVIDIA H200"),   point("fast20", 120, 1200, "NVIDIA H200"),
                   point("mixed", 120, 900, "NVIDIA H200"),   point("fresh", 100, 1000, "NVIDIA H200"),
                   {{"status", "diverged"}, {"label", "broke"}, {"error", "the loss diverged at step 3"}},
                   {{"status", "ok"}, {"label", "blank"}},  // ok, but no figures
                   {{"status", "failed"}, {"label", "retried"}}, point("retried", 100, 1000, "NVIDIA H200"),
                   point("healed", 100, 1000, "NVIDIA H200"), {{"status", "failed"}, {"label", "bad"}}};
  return s;
}

TEST(ResultsCompare, VerdictsCountsAndNotes) {
  const ComparisonSets s = comparison_sets();
  // Records alone (no directory to read their runs from): judged on their medians.
  const ResultsComparison c = compare_results({s.old_records, ""}, {s.new_records, ""}, 0.05);
  EXPECT_EQ(c.matched, 8);
  // slow10, mixed (a fall is not offset by a rise), broke (ok -> diverged), blank (ok -> no figures)
  EXPECT_EQ(c.regressions, 4);
  EXPECT_EQ(c.only_old, std::vector<std::string>{"gone"});
  EXPECT_EQ(c.only_new, std::vector<std::string>{"fresh"});

  const std::string& t = c.text;
  EXPECT_NE(line_of(t, "same").find(" ok"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slow10").find("REGRESSED"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slow10").find("-10.0%"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slow3").find(" ok"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slow3").find("(no per-step samples: not tested for significance)"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "fast20").find("improved"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "fast20").find("+20.0%"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "mixed").find("REGRESSED"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "broke").find("REGRESSED (now diverged)"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "blank").find("REGRESSED (no figures)"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "retried").find(" ok"), std::string::npos) << t;  // the later record wins
  EXPECT_NE(t.find("only in OLD: gone\n"), std::string::npos) << t;
  EXPECT_NE(t.find("only in NEW: fresh\n"), std::string::npos) << t;
  EXPECT_NE(t.find("2 points were not ok in OLD"), std::string::npos) << t;
  EXPECT_NE(t.find("1 of them are ok in NEW"), std::string::npos) << t;
  EXPECT_NE(t.find("device: NVIDIA H100 -> NVIDIA H200\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("commit:"), std::string::npos) << t;  // the same on both sides
  EXPECT_NE(t.find("8 points compared, 4 regressed beyond 5%\n"), std::string::npos) << t;

  // Columns line up: the verdict starts at the same offset on every row.
  const size_t at = line_of(t, "label").find("verdict");
  ASSERT_NE(at, std::string::npos) << t;
  for (const char* label : {"same", "slow10", "slow3", "fast20", "mixed", "broke", "blank"}) {
    EXPECT_NE(line_of(t, label).substr(at, 2), "  ") << label << "\n" << t;
    EXPECT_EQ(line_of(t, label)[at - 1], ' ') << label << "\n" << t;
  }
}

// A label is a point of a sweep file; an edited file (or base run) measures
// another configuration under it, which the comparison says.
TEST(ResultsCompare, PointsWhoseSettingsDifferAreNamed) {
  json old_a = point("a", 100, 1000), old_b = point("b", 100, 1000), new_a = point("a", 100, 1000), new_b = point("b", 100, 1000);
  old_a["config_hash"] = new_a["config_hash"] = "1111";
  old_b["config_hash"] = "2222";
  new_b["config_hash"] = "3333";
  const ResultsComparison c = compare_results({{old_a, old_b}, ""}, {{new_a, new_b}, ""}, 0.05);
  EXPECT_EQ(c.matched, 2);
  EXPECT_NE(c.text.find("settings differ: b ran another configuration in NEW"), std::string::npos) << c.text;
  EXPECT_EQ(c.text.find("settings differ: a"), std::string::npos) << c.text;
}

TEST(ResultsCompare, ThresholdDecidesWhatCounts) {
  const ComparisonSets s = comparison_sets();
  const ResultsComparison c = compare_results({s.old_records, ""}, {s.new_records, ""}, 0.02);
  EXPECT_EQ(c.regressions, 5);  // slow3 now falls beyond the threshold too
  EXPECT_NE(line_of(c.text, "slow3").find("REGRESSED"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("regressed beyond 2%\n"), std::string::npos) << c.text;
}

TEST(ResultsCompare, ParsesThresholds) {
  EXPECT_DOUBLE_EQ(parse_threshold("5%"), 0.05);
  EXPECT_DOUBLE_EQ(parse_threshold("0.05"), 0.05);
  EXPECT_DOUBLE_EQ(parse_threshold("12.5%"), 0.125);
  EXPECT_DOUBLE_EQ(parse_threshold("0%"), 0.0);
  for (const char* bad : {"abc", "-1%", "150", "5", "", "5%%", "0.05x", "100%"}) {
    try {
      parse_threshold(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}


// ---- the timed steps of a run --------------------------------------------------

TEST(StepSamples, ReadTheTimedStepsOfEachRun) {
  const fs::path dir = scratch("samples");
  const json a = crafted::write_run(dir, "p001", "x", {1000, 1100, 900}, 2);
  const json b = crafted::write_run(dir, "p001r2", "x", {800, 850}, 1);
  const StepSamples tokens = read_step_samples({&a, &b}, dir.string(), "tokens_per_second");
  EXPECT_EQ(tokens.problem, "");
  // The slow warm-up steps are left out.
  EXPECT_EQ(tokens.runs, (std::vector<std::vector<double>>{{1000, 1100, 900}, {800, 850}}));
  EXPECT_EQ(tokens.count(), 5u);
  const StepSamples tflops = read_step_samples({&a}, dir.string(), "tflops_per_gpu");
  ASSERT_EQ(tflops.count(), 3u) << tflops.problem;
  EXPECT_DOUBLE_EQ(tflops.runs[0][1], crafted::tflops_at(1100));
  fs::remove_all(dir);
}

TEST(StepSamples, SayWhyTheyCannotBeRead) {
  const fs::path dir = scratch("samples_bad");
  const json good = crafted::write_run(dir, "p001", "x", {1000, 1100, 900});
  const auto problem = [&](const json& record) {
    const StepSamples s = read_step_samples({&good, &record}, dir.string(), "tokens_per_second");
    EXPECT_TRUE(s.runs.empty()) << s.problem;  // all or nothing: a point is tested on all its runs
    return s.problem;
  };
  json r = good;
  EXPECT_NE(read_step_samples({&good}, "", "tokens_per_second").problem.find("no results directory"),
            std::string::npos);
  r.erase("run_dir");
  EXPECT_NE(problem(r).find("p001: the record has no run_dir"), std::string::npos) << problem(r);
  r = good;
  r["run_dir"] = "runs/gone";
  EXPECT_NE(problem(r).find("runs/gone"), std::string::npos) << problem(r);
  r = good;
  r["timed_steps"] = 4;  // the steps are not those the record summarised
  EXPECT_NE(problem(r).find("has 3 steps after the warm-up; the record summarised 4"), std::string::npos) << problem(r);
  r = good;
  r.erase("warmup_steps");
  EXPECT_NE(problem(r).find("the record has no warmup_steps"), std::string::npos) << problem(r);
  EXPECT_NE(read_step_samples({&good}, dir.string(), "mfu").problem.find("step 2 has no positive mfu"),
            std::string::npos);
  fs::remove_all(dir);
}

// ---- repeats of a point ----------------------------------------------------------

json run_record(const std::string& id, const std::string& label, const std::string& status, double tokens) {
  return {{"run_id", id}, {"label", label}, {"status", status}, {"role", id[0] == 'b' ? "baseline" : "point"},
          {"tokens_per_second", tokens}, {"tflops_per_gpu", tokens / 100}};
}

TEST(PointRepeats, GroupRunsByLabelAndLetAReRunSupersede) {
  const std::vector<json> records = {run_record("p001", "a", "ok", 1), run_record("p001r2", "a", "failed", 1),
                                     run_record("b001", "baseline of a", "ok", 1),
                                     run_record("p001r2", "a", "ok", 1),  // --retry-failed ran it again
                                     {{"run_id", "x"}, {"status", "ok"}}};
  const PointIndex index = index_points(records);
  ASSERT_EQ(index.points.size(), 2u);
  const PointRuns* a = index.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->runs.size(), 2u);
  EXPECT_EQ(a->runs[1], &records[3]);
  EXPECT_TRUE(a->ok());
  EXPECT_EQ(index.superseded, 1);
  EXPECT_EQ(index.unlabeled, 1);
  EXPECT_EQ(index.find("nothing"), nullptr);
  PointRuns broken = *a;
  broken.runs[1] = &records[1];
  EXPECT_EQ(broken.status(), "failed");
}

TEST(PointRepeats, PoolTheMediansOfTheRuns) {
  std::vector<json> runs;
  const double tflops[] = {1, 3, 2}, memory[] = {5, 7, 6}, loss[] = {1e-6, 3e-6, 2e-6}, llm[] = {0.3, 0.1, 0.2};
  for (int i = 0; i < 3; ++i) {
    json r = run_record(i ? "p001r" + std::to_string(i + 1) : "p001", "a", "ok", 10 * tflops[i]);
    r["tflops_per_gpu"] = tflops[i];
    r["peak_memory_mib"] = memory[i];
    r["loss_max_rel_diff"] = loss[i];
    r["eval_loss_max_rel_diff"] = loss[2 - i] / 10;  // held-out: the worst run's, 3e-7
    r["loss_parity_ok"] = i != 1;
    r["phases"] = {{"llm_forward", llm[i]}};
    r["timed_steps"] = 8;
    runs.push_back(r);
  }
  runs.push_back(run_record("p001r4", "a", "failed", 0));  // left out of the figures
  const PointIndex index = index_points(runs);
  const json pooled = pooled_record(index.points[0]);
  EXPECT_EQ(pooled["run_id"], "p001");
  EXPECT_DOUBLE_EQ(pooled["tflops_per_gpu"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(pooled["tokens_per_second"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(pooled["peak_memory_mib"].get<double>(), 7.0);
  EXPECT_DOUBLE_EQ(pooled["loss_max_rel_diff"].get<double>(), 3e-6);
  EXPECT_DOUBLE_EQ(pooled["eval_loss_max_rel_diff"].get<double>(), 3e-7);
  EXPECT_FALSE(pooled["loss_parity_ok"].get<bool>());
  EXPECT_DOUBLE_EQ(pooled["phases"]["llm_forward"].get<double>(), 0.2);
  EXPECT_EQ(pooled["timed_steps"], 24);
  EXPECT_EQ(pooled["repeats"], 3);
  EXPECT_EQ(pooled["repeat_run_ids"], json({"p001", "p001r2", "p001r3"}));
  PointRuns none{"b", {&runs[3]}};
  EXPECT_THROW(pooled_record(none), std::invalid_argument);
}

TEST(PointRepeats, PoolRepeatsOfASweepWithItsSpeedups) {
  json p001 = run_record("p001", "a", "ok", 110), p001r2 = run_record("p001r2", "a", "ok", 130);
  json p002 = run_record("p002", "c", "ok", 99);  // one run, its baseline pooled
  p001["baseline_id"] = p002["baseline_id"] = "b001";
  p001r2["baseline_id"] = "b001r2";
  json single = run_record("p009", "d", "ok", 5);
  single["speedup_tokens"] = 0.5;  // neither it nor a baseline pooled: kept as recorded
  single["baseline_id"] = "b009";
  const std::vector<json> records = {run_record("b001", "baseline of a", "ok", 100), p001, p002,
                                     run_record("p003", "e", "ok", 1), run_record("b001r2", "baseline of a", "ok", 120),
                                     p001r2, run_record("p003r2", "e", "failed", 0), single};
  const std::vector<json> rows = pool_repeats(records);
  std::vector<std::string> ids;
  for (const json& r : rows) ids.push_back(r["run_id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"b001", "p001", "p002", "p003", "p003r2", "p009"}));
  EXPECT_DOUBLE_EQ(rows[0]["tokens_per_second"].get<double>(), 110.0);
  EXPECT_DOUBLE_EQ(rows[1]["tokens_per_second"].get<double>(), 120.0);
  EXPECT_DOUBLE_EQ(rows[1]["speedup_tokens"].get<double>(), 120.0 / 110.0);
  EXPECT_DOUBLE_EQ(rows[1]["speedup_tflops"].get<double>(), 120.0 / 110.0);
  EXPECT_DOUBLE_EQ(rows[2]["speedup_tokens"].get<double>(), 99.0 / 110.0);
  EXPECT_EQ(rows[3]["repeats"], 1);
  EXPECT_EQ(rows[4]["status"], "failed");
  EXPECT_EQ(rows[5], single);
  // A sweep run once comes back unchanged.
  const std::vector<json> once = {run_record("b001", "baseline of a", "ok", 100), p001, p002};
  EXPECT_EQ(pool_repeats(once), once);
}

// ---- the regression check on per-step samples ---------------------------------

struct SampleSides {
  explicit SampleSides(fs::path scratch_dir) : dir(std::move(scratch_dir)) {}
  fs::path dir;
  std::vector<json> old_records, new_records;
  ResultsComparison compare(double threshold = 0.05) {
    crafted::write_records(dir / "old", old_records);
    crafted::write_records(dir / "new", new_records);
    // NEW named by its results.jsonl: the runs are found beside it all the same.
    return compare_results(read_result_set((dir / "old").string()),
                           read_result_set((dir / "new" / "results.jsonl").string()), threshold);
  }
  void add(const std::string& label, const std::vector<double>& old_tokens, const std::vector<double>& new_tokens) {
    const std::string id = "p" + std::to_string(100 + old_records.size());
    old_records.push_back(crafted::write_run(dir / "old", id, label, old_tokens));
    new_records.push_back(crafted::write_run(dir / "new", id, label, new_tokens));
  }
};

TEST(ResultsCompare, JudgesOnTheTimedStepsOfBothSides) {
  SampleSides s{scratch("compare_steps")};
  s.add("noisy", crafted::kNoisyOld, crafted::kNoisyNew);
  s.add("slower", crafted::around(1000, 0.01, 12), crafted::around(800, 0.01, 12));
  s.add("slightly", crafted::around(1000, 0.005, 12), crafted::around(970, 0.005, 12));
  s.add("faster", crafted::around(1000, 0.01, 12), crafted::around(1200, 0.01, 12));
  s.add("same", crafted::around(1000, 0.01, 12), crafted::around(1000, 0.01, 12));
  const ResultsComparison c = s.compare();
  const std::string& t = c.text;
  EXPECT_EQ(c.matched, 5);
  EXPECT_EQ(c.regressions, 1) << t;
  // Beyond the threshold, but the samples overlap: noise.
  EXPECT_NE(line_of(t, "noisy").find("-6.5%"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "noisy").find("ok (drop within noise)"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slower").find("-20.0% [-2"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slower").find("REGRESSED"), std::string::npos) << t;
  // Real, but under the threshold.
  EXPECT_NE(line_of(t, "slightly").find("-3.0%"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "slightly").find("[-3."), std::string::npos) << t;  // wholly below no change
  EXPECT_NE(line_of(t, "slightly").find("ok (significant drop under 5%)"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "faster").find("+20.0% [+"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "faster").find("improved"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "same").find("+0.0%"), std::string::npos) << t;
  EXPECT_NE(line_of(t, "same").find("p=1"), std::string::npos) << t;
  EXPECT_EQ(line_of(t, "same").substr(line_of(t, "same").size() - 3), " ok") << t;
  // The medians shown are of the timed steps (the slow warm-up left out).
  EXPECT_NE(line_of(t, "slower").find("1000 ->  800"), std::string::npos) << t;
  EXPECT_EQ(t.find("not tested"), std::string::npos) << t;
  EXPECT_NE(t.find("rule: a point REGRESSED when TFLOPS/GPU or tokens/s fell by more than 5% and its interval lies "
                   "wholly below no change"), std::string::npos) << t;
  // With a threshold under the small drop, the small drop is a regression too.
  EXPECT_EQ(s.compare(0.02).regressions, 2);
  fs::remove_all(s.dir);
}

TEST(ResultsCompare, PoolsTheRepeatsOfAPoint) {
  SampleSides s{scratch("compare_repeats")};
  for (const double level : {0.99, 1.0, 1.01}) {
    const std::string suffix = level == 0.99 ? "" : level == 1.0 ? "r2" : "r3";
    s.old_records.push_back(crafted::write_run(s.dir / "old", "p001" + suffix, "slower",
                                               crafted::around(1000 * level, 0.01, 6)));
    s.new_records.push_back(crafted::write_run(s.dir / "new", "p001" + suffix, "slower",
                                               crafted::around(800 * level, 0.01, 6)));
    s.old_records.push_back(crafted::write_run(s.dir / "old", "p002" + suffix, "broke",
                                               crafted::around(1000, 0.01, 6)));
    json again = crafted::write_run(s.dir / "new", "p002" + suffix, "broke", crafted::around(1000, 0.01, 6));
    if (suffix == "r2") again = {{"run_id", "p002r2"}, {"label", "broke"}, {"status", "failed"}, {"error", "exit 1"}};
    s.new_records.push_back(again);
  }
  const ResultsComparison c = s.compare();
  EXPECT_EQ(c.regressions, 2) << c.text;
  EXPECT_NE(line_of(c.text, "slower").find("-20.0% ["), std::string::npos) << c.text;
  EXPECT_NE(line_of(c.text, "slower").find("REGRESSED"), std::string::npos) << c.text;
  EXPECT_NE(line_of(c.text, "broke").find("REGRESSED (now failed in 1 of 3 runs)"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("repeats pooled: up to 3 runs a point in OLD, 3 in NEW"), std::string::npos) << c.text;
  fs::remove_all(s.dir);
}

TEST(ResultsCompare, TooFewStepsAreJudgedOnTheMediansAlone) {
  SampleSides s{scratch("compare_few")};
  s.add("short", {1000, 1010, 990}, {800, 810, 790});
  const ResultsComparison c = s.compare();
  EXPECT_EQ(c.regressions, 1);
  EXPECT_NE(line_of(c.text, "short").find("REGRESSED (no per-step samples: not tested for significance)"),
            std::string::npos) << c.text;
  EXPECT_NE(c.text.find("not tested for significance: short: OLD: only 3 timed steps (at least 5 a side are needed)"),
            std::string::npos) << c.text;
  fs::remove_all(s.dir);
}

}  // namespace
}  // namespace hetpar
