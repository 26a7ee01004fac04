// Sweep results: reading results.jsonl, its CSV view, and the regression check
// between two sets of results.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "metrics/results_compare.hpp"
#include "metrics/results_csv.hpp"

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
    "tflops_per_gpu", "mfu", "tokens_per_second", "image_tokens_per_second", "samples_per_second",
    "peak_memory_mib", "speedup_tflops", "speedup_tokens", "loss_max_rel_diff", "loss_parity_ok",
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
  const ResultsComparison c = compare_results(s.old_records, s.new_records, 0.05);
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

TEST(ResultsCompare, ThresholdDecidesWhatCounts) {
  const ComparisonSets s = comparison_sets();
  const ResultsComparison c = compare_results(s.old_records, s.new_records, 0.02);
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

}  // namespace
}  // namespace hetpar
