// `hetpar sweep` and `hetpar compare --results` end to end with the real
// binary: a 2-point sweep runs with its baseline, survives a kill and resumes
// without repeating or losing runs, writes the CSV, the report and the plots;
// invalid points are listed; failed runs are recorded and the sweep goes on;
// the regression check's exit codes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "launch/local_limits.hpp"
#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;
const std::string kSweeps = test_data_path("/sweeps");

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  return dir;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Processes whose command line mentions `needle`.
int processes_mentioning(const std::string& needle) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(needle) != std::string::npos && entry.path().filename() != std::to_string(getpid())) ++n;
  }
  return n;
}

TEST(Sweep, RunsResumesAfterAKillAndWritesEverything) {
  const std::string out = fresh_dir("sweep_e2e");
  const std::string sweep = kSweeps + "/two_points.toml", hetpar = hetpar_binary();
  // Start the sweep and kill it (SIGKILL: no clean-up) once its first run is recorded.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string log = ::testing::TempDir() + "/sweep_e2e_first_" + std::to_string(getpid()) + ".log";
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    execl(hetpar.c_str(), hetpar.c_str(), "sweep", sweep.c_str(), "--out", out.c_str(), "--no-plots", "--set",
          "run.eval_every=3", nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(150);
  while (lines_of(out + "/results.jsonl").empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const std::vector<std::string> before = lines_of(out + "/results.jsonl");
  ASSERT_EQ(before.size(), 1u) << "the first run did not finish in time";
  // The run that was going on dies with the sweep: no rank is left behind.
  for (int i = 0; i < 50 && processes_mentioning(out + "/runs") > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(processes_mentioning(out + "/runs"), 0);

  // Held-out losses after each run's last step (of 3), compared with the baseline's.
  const auto [code, output] =
      run_command(hetpar_binary() + " sweep " + sweep + " --out " + out + " --set run.eval_every=3");
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("resuming: 1 runs already finished"), std::string::npos) << output;
  const std::vector<std::string> after = lines_of(out + "/results.jsonl");
  ASSERT_EQ(after.size(), 3u) << output;
  EXPECT_EQ(after[0], before[0]);  // kept, not repeated
  std::set<std::string> ids;
  for (const std::string& line : after) {
    const auto record = nlohmann::json::parse(line);
    ids.insert(record["run_id"].get<std::string>());
    EXPECT_EQ(record["status"], "ok") << line;
    EXPECT_GT(record["tflops_per_gpu"].get<double>(), 0);
    EXPECT_GT(record["flops_per_step"].get<double>(), 0);
    EXPECT_EQ(record["commit"].get<std::string>().empty(), false);
    if (record["role"] == "point") {
      EXPECT_EQ(record["baseline_id"], "b001");
      EXPECT_LE(record["loss_max_rel_diff"].get<double>(), 1e-5) << line;
      EXPECT_LE(record["eval_loss_max_rel_diff"].get<double>(), 1e-5) << line;
      EXPECT_EQ(record["eval_loss_compared_steps"].get<int>(), 1) << line;
      EXPECT_TRUE(record["loss_parity_ok"].get<bool>());
      EXPECT_GT(record["speedup_tflops"].get<double>(), 0);
    }
  }
  EXPECT_EQ(ids, (std::set<std::string>{"b001", "p001", "p002"}));

  const std::vector<std::string> csv = lines_of(out + "/results.csv");
  ASSERT_EQ(csv.size(), 4u);
  for (const char* column : {"run_id", "tflops_per_gpu", "tokens_per_second", "mfu", "loss_max_rel_diff", "eval_loss_max_rel_diff",
                             "axis.placement", "phase.llm_forward", "phase.wait", "commit", "device"}) {
    EXPECT_NE(csv[0].find(column), std::string::npos) << column << " missing from " << csv[0];
  }
  std::string report;
  for (const std::string& line : lines_of(out + "/report.md")) report += line + "\n";
  EXPECT_NE(report.find("every point held it"), std::string::npos) << report;
  EXPECT_NE(report.find("Held-out losses: 2 points evaluated beside their baselines"), std::string::npos) << report;
  for (const char* figure : {"tflops_per_gpu", "speedup_vs_encoder", "loss_curves", "phase_breakdown"}) {
    for (const char* ext : {".png", ".svg"}) {
      const std::string file = out + "/plots/" + figure + ext;
      ASSERT_TRUE(fs::exists(file)) << file << "\n" << output;
      EXPECT_GT(fs::file_size(file), 1000u) << file;
    }
  }
}

// The same sweep with its ranks started by torchrun (as on a cluster node).
TEST(Sweep, RunsThroughALaunchPrefix) {
  const std::string out = fresh_dir("sweep_torchrun");
  // torchrun leaves a log directory in TMPDIR each launch: under the tests' scratch, not /tmp.
  const auto [code, output] =
      run_command("TMPDIR=" + ::testing::TempDir() + " " + hetpar_binary() + " sweep " + kSweeps +
                  "/two_points.toml --no-plots --set run.steps=2 --out " + out + " --launch '" + torchrun_binary() +
                  " --nproc-per-node {ranks} --no-python'");
  ASSERT_EQ(code, 0) << output;
  const std::vector<std::string> lines = lines_of(out + "/results.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (const std::string& line : lines) EXPECT_EQ(nlohmann::json::parse(line)["status"], "ok") << line;
  std::string log;
  for (const std::string& line : lines_of(out + "/runs/p001/train.log")) log += line + "\n";
  EXPECT_NE(log.find("launched by torchrun"), std::string::npos) << log;
}

TEST(Sweep, DryRunListsInvalidPointsWithTheirReason) {
  const auto [code, output] = run_command(hetpar_binary() + " sweep " + kSweeps + "/with_invalid.toml --dry-run");
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("p002  enc-64x2 / llm-tp3"), std::string::npos) << output;
  EXPECT_NE(output.find("INVALID"), std::string::npos) << output;
  EXPECT_NE(output.find("layout.llm.tp"), std::string::npos) << output;
  EXPECT_NE(output.find("4 points (2 valid, 2 invalid), 2 baselines"), std::string::npos) << output;
}

// Runs on data.files count the files' images; files that cannot be read make every run invalid, named.
TEST(Sweep, DryRunNamesUnreadableDataFiles) {
  const auto [code, output] = run_command(hetpar_binary() + " sweep " + kSweeps +
                                          "/two_points.toml --dry-run --set data.files=/nonexistent/shards");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("INVALID: data.files: /nonexistent/shards: not a directory of batch files"), std::string::npos)
      << output;
  EXPECT_NE(output.find("(0 valid, 2 invalid)"), std::string::npos) << output;
}

TEST(Sweep, FailedRunsAreRecordedAndTheSweepGoesOn) {
  const std::string out = fresh_dir("sweep_failing");
  // Rank 1 of every run dies at step 2.
  const auto [code, output] = run_command("HETPAR_FAULT=1:2 " + hetpar_binary() + " sweep " + kSweeps +
                                          "/two_points.toml --no-plots --set runtime.timeout_s=5 --out " + out);
  EXPECT_EQ(code, 1) << output;
  const std::vector<std::string> lines = lines_of(out + "/results.jsonl");
  ASSERT_EQ(lines.size(), 3u) << output;
  for (const std::string& line : lines) {
    const auto record = nlohmann::json::parse(line);
    EXPECT_EQ(record["status"], "failed");
    EXPECT_NE(record["error"].get<std::string>().find("exit code"), std::string::npos) << line;
  }
  EXPECT_NE(output.find("3 failed"), std::string::npos) << output;
}

// A rank out of memory (an allocation failing as the allocator's does) ends
// its run with exit code 6 and words that say so; a sweep records the point
// as "oom" and goes on.
TEST(Sweep, OutOfMemoryIsAnOutcome) {
  const std::string out = fresh_dir("sweep_oom");
  const auto [train_code, train_output] = run_command(
      "HETPAR_FAULT=1:2:oom " + hetpar_binary() + " train " + source_tree_path("/workloads/runs/quickstart.toml") +
      " --set runtime.timeout_s=5 --set run.steps=3 --out " + out + "_train");
  EXPECT_EQ(train_code, 6) << train_output;
  EXPECT_NE(train_output.find("rank 1 failed first with exit code 6"), std::string::npos) << train_output;
  EXPECT_NE(train_output.find("out of memory on rank 1 (device cpu)"), std::string::npos) << train_output;
  const auto [code, output] = run_command("HETPAR_FAULT=1:2:oom " + hetpar_binary() + " sweep " + kSweeps +
                                          "/two_points.toml --no-plots --set runtime.timeout_s=5 --out " + out);
  EXPECT_EQ(code, 1) << output;
  const std::vector<std::string> lines = lines_of(out + "/results.jsonl");
  ASSERT_EQ(lines.size(), 3u) << output;
  for (const std::string& line : lines) {
    const auto record = nlohmann::json::parse(line);
    EXPECT_EQ(record["status"], "oom") << line;
    EXPECT_NE(record["error"].get<std::string>().find("out of memory on rank 1"), std::string::npos) << line;
  }
  std::filesystem::remove_all(out + "_train");
}

// A diverged point is an outcome: recorded, the sweep goes on, and re-runs
// neither crash nor duplicate records; --retry-failed runs it again; a
// record torn by a crash is dropped; invalid points are recorded once.
TEST(Sweep, DivergedRunsAreRecordedAndResumeIsIdempotent) {
  const std::string out = fresh_dir("sweep_diverging");
  const std::string sweep = hetpar_binary() + " sweep " + kSweeps + "/diverging.toml --no-plots --out " + out;
  auto status_of = [&] {
    std::map<std::string, std::string> status;
    for (const std::string& line : lines_of(out + "/results.jsonl")) {
      const auto record = nlohmann::json::parse(line);
      status[record["run_id"].get<std::string>()] = record["status"].get<std::string>();
    }
    return status;
  };
  const std::map<std::string, std::string> expected = {
      {"b001", "ok"}, {"p001", "ok"}, {"b002", "diverged"}, {"p002", "diverged"}, {"p003", "invalid"}};
  auto [code, output] = run_command(sweep);
  EXPECT_EQ(code, 1) << output;  // not every run is ok
  EXPECT_EQ(status_of(), expected) << output;
  EXPECT_NE(output.find("p002 (diverging / colocated): diverged: the loss diverged at step"), std::string::npos)
      << output;
  const std::vector<std::string> first = lines_of(out + "/results.jsonl");
  ASSERT_EQ(first.size(), 5u);

  // A crash mid-write leaves half a record without a newline.
  std::ofstream(out + "/results.jsonl", std::ios::app) << R"({"run_id": "p00)";
  std::tie(code, output) = run_command(sweep);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("dropped the unfinished last record"), std::string::npos) << output;
  EXPECT_NE(output.find("resuming: 4 runs already finished"), std::string::npos) << output;
  EXPECT_EQ(lines_of(out + "/results.jsonl"), first) << output;  // nothing repeated, nothing lost

  std::tie(code, output) = run_command(sweep + " --retry-failed");
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("--retry-failed: running 2 failed runs again"), std::string::npos) << output;
  EXPECT_EQ(lines_of(out + "/results.jsonl").size(), 5u) << output;
  EXPECT_EQ(status_of(), expected) << output;
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Resuming never replaces a measured result with "invalid": a point this
// machine cannot host keeps the records measured where it could (here: this
// machine before its cores were restricted), its repeats' too, and the
// refusal points to --launch. A point made invalid by an edit of the sweep
// file is refused like any other change, as is a record hetpar did not
// write; the results and sweep.toml stay as they were.
TEST(Sweep, ResumingKeepsMeasuredResults) {
  if (usable_cores() < 2 || run_command("taskset -c 0 true").first != 0) {
    GTEST_SKIP() << "needs 2 cores (5 ranks run here first) and taskset";
  }
  const std::string out = fresh_dir("sweep_keep"), file = out + ".toml";
  const auto write_sweep = [&](int narrow_tp) {
    std::ofstream(file) << "[sweep]\nname = \"keep\"\nbase = \"" << kSweeps << "/tiny_base.toml\"\n"
                        << "baseline = { layout = { placement = \"uniform\", encoder = { tp = 1, dp = 1 }, "
                           "llm = { tp = 1, dp = 1 } } }\n[[axis]]\nname = \"layout\"\n[[axis.value]]\n"
                        << "name = \"narrow\"\nset = { layout = { llm = { tp = " << narrow_tp << " } } }\n"
                        << "[[axis.value]]\nname = \"wide\"\nset = { layout = { placement = \"non-colocated\", "
                           "encoder = { dp = 1 }, llm = { tp = 2, dp = 2 } } }\n";
  };
  write_sweep(2);
  const std::string sweep = " sweep " + file + " --out " + out + " --no-plots --set run.steps=2 --repeat 2";
  auto [code, output] = run_command(hetpar_binary() + sweep);
  ASSERT_EQ(code, 0) << output;
  const std::string results = text_of(out + "/results.jsonl"), sweep_toml = text_of(out + "/sweep.toml");
  ASSERT_EQ(lines_of(out + "/results.jsonl").size(), 6u) << results;  // b001 p001 p002, twice

  std::tie(code, output) = run_command("taskset -c 0 " + hetpar_binary() + sweep);  // 4 ranks at most now
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("skipping p002 (wide): the layout needs 5 ranks"), std::string::npos) << output;
  EXPECT_NE(output.find("run it with --launch on a cluster"), std::string::npos) << output;
  EXPECT_EQ(output.find("--oversubscribe"), std::string::npos) << output;  // train's option, not the sweep's
  EXPECT_EQ(text_of(out + "/results.jsonl"), results);

  std::vector<std::string> lines = lines_of(out + "/results.jsonl");
  nlohmann::json first = nlohmann::json::parse(lines[0]);
  first["run_id"] = 1;
  lines[0] = first.dump();
  std::string corrupt;
  for (const std::string& line : lines) corrupt += line + "\n";
  std::ofstream(out + "/results.jsonl") << corrupt;
  std::tie(code, output) = run_command(hetpar_binary() + sweep);
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find(out + "/results.jsonl:1: run_id must be a string"), std::string::npos) << output;
  std::ofstream(out + "/results.jsonl") << results;

  write_sweep(3);  // llm tp 3 does not divide the heads: p001 is invalid now
  std::tie(code, output) = run_command(hetpar_binary() + sweep);
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("holds results of another sweep definition (run p001: it is invalid now"), std::string::npos)
      << output;
  EXPECT_EQ(text_of(out + "/results.jsonl"), results);
  EXPECT_EQ(text_of(out + "/sweep.toml"), sweep_toml);
}

// A NaN passed CLI11's range checks: a NaN timeout never fired. Refused, like inf.
TEST(Sweep, NonFiniteNumbersAreRefused) {
  const std::string out = fresh_dir("sweep_nan");
  for (const char* value : {"nan", "inf"}) {
    const auto [code, output] = run_command(hetpar_binary() + " sweep " + kSweeps + "/two_points.toml --out " + out +
                                            " --run-timeout " + value);
    EXPECT_EQ(code, 2) << output;
    EXPECT_NE(output.find(std::string("--run-timeout: not a finite number: ") + value), std::string::npos) << output;
    EXPECT_FALSE(fs::exists(out)) << "a run started";
  }
  const auto [code, output] = run_command(hetpar_binary() + " compare " + out + "_a " + out + "_b --rtol nan");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("--rtol: not a finite number: nan"), std::string::npos) << output;
}

void write_results(const std::string& dir, double tflops, double tokens) {
  fs::create_directories(dir);
  std::ofstream(dir + "/results.jsonl")
      << nlohmann::json{{"label", "a"}, {"status", "ok"}, {"tflops_per_gpu", tflops}, {"tokens_per_second", tokens}}.dump()
      << "\n"
      << nlohmann::json{{"label", "b"}, {"status", "ok"}, {"tflops_per_gpu", 1.0}, {"tokens_per_second", 100.0}}.dump()
      << "\n";
}

TEST(Sweep, CompareResultsExitCodes) {
  const std::string dir = fresh_dir("compare_results");
  write_results(dir + "/old", 1.0, 100.0);
  write_results(dir + "/same", 1.0, 100.0);
  write_results(dir + "/slower", 0.8, 80.0);
  const std::string compare = hetpar_binary() + " compare --results " + dir + "/old ";
  EXPECT_EQ(run_command(compare + dir + "/same").first, 0);
  const auto [regressed, text] = run_command(compare + dir + "/slower");
  EXPECT_EQ(regressed, 1) << text;
  EXPECT_NE(text.find("REGRESSED"), std::string::npos) << text;
  EXPECT_EQ(run_command(compare + dir + "/slower --threshold 25%").first, 0);
  EXPECT_EQ(run_command(compare + dir + "/missing").first, 2);
  EXPECT_EQ(run_command(compare + dir + "/same --threshold abc").first, 2);
}

}  // namespace
}  // namespace hetpar::test

namespace hetpar::test {
namespace {

// sweep --profile: each finished run's predicted step time beside its
// measured median, in results.jsonl, results.csv and the report; a profile
// that cannot be read is refused before any run starts.
TEST(Sweep, PredictionsSitBesideTheMeasurement) {
  const std::string out = fresh_dir("sweep_predicted"), profile = out + "_profile.json";
  auto [code, output] = run_command(hetpar_binary() + " calibrate --quick --ranks 2 --out " + profile);
  ASSERT_EQ(code, 0) << output;
  std::tie(code, output) = run_command(hetpar_binary() + " sweep " + kSweeps + "/two_points.toml --out " +
                                       out + " --no-plots --profile " + profile);
  ASSERT_EQ(code, 0) << output;
  int predicted = 0;
  for (const std::string& line : lines_of(out + "/results.jsonl")) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["status"] != "ok") continue;
    ASSERT_TRUE(r.contains("predicted_step_seconds")) << line;
    EXPECT_GT(r["predicted_step_seconds"].get<double>(), 0) << line;
    EXPECT_DOUBLE_EQ(r["prediction_error"].get<double>(),
                     r["predicted_step_seconds"].get<double>() / r["step_seconds_median"].get<double>() - 1);
    // The memory model's fullest rank beside the measured peak resident memory.
    EXPECT_GT(r["predicted_peak_memory_mib"].get<double>(), 0) << line;
    EXPECT_DOUBLE_EQ(r["memory_prediction_error"].get<double>(),
                     r["predicted_peak_memory_mib"].get<double>() / r["peak_memory_mib"].get<double>() - 1);
    // And without the runtime's part beside the measured tensor peak.
    EXPECT_GT(r["peak_tensor_mib"].get<double>(), 0) << line;
    EXPECT_LT(r["predicted_tensor_mib"].get<double>(), r["predicted_peak_memory_mib"].get<double>()) << line;
    EXPECT_DOUBLE_EQ(r["tensor_prediction_error"].get<double>(),
                     r["predicted_tensor_mib"].get<double>() / r["peak_tensor_mib"].get<double>() - 1);
    ++predicted;
  }
  EXPECT_EQ(predicted, 3);  // two points and their baseline
  EXPECT_NE(lines_of(out + "/results.csv").front().find("predicted_step_seconds,prediction_error"), std::string::npos);
  std::ifstream report(out + "/report.md");
  const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("## Predicted step time"), std::string::npos) << text;
  EXPECT_NE(text.find("median |error|"), std::string::npos) << text;
  EXPECT_NE(text.find("Peak memory"), std::string::npos) << text;
  EXPECT_NE(text.find("Tensor memory"), std::string::npos) << text;

  // Runs in bf16 against this CPU's fp32 profile: measured, and no prediction beside them, saying why.
  const std::string bf16 = fresh_dir("sweep_predicted_bf16");
  std::tie(code, output) = run_command(hetpar_binary() + " sweep " + kSweeps + "/two_points.toml --out " + bf16 +
                                       " --no-plots --set run.precision=bf16 --set run.steps=2 --profile " + profile);
  ASSERT_EQ(code, 0) << output;
  int refused = 0;
  for (const std::string& line : lines_of(bf16 + "/results.jsonl")) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["status"] != "ok") continue;
    EXPECT_FALSE(r.contains("predicted_step_seconds")) << line;
    EXPECT_NE(r.value("prediction_failed", "").find("the profile measures fp32"), std::string::npos) << line;
    ++refused;
  }
  EXPECT_EQ(refused, 3);

  const std::string never = fresh_dir("sweep_bad_profile");
  std::tie(code, output) = run_command(hetpar_binary() + " sweep " + kSweeps + "/two_points.toml --out " +
                                       never + " --profile " + never + "_missing.json");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("cannot read the profile"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(never)) << "a run started before the profile was refused";
}

}  // namespace
}  // namespace hetpar::test
