// The real `hetpar` binary used carelessly: a mistyped layout, unusable
// output paths, output paths holding a user's files, a full disk, a diverging run, a bad launch environment, a
// peer that stops answering, output read through a pipe or file, and sweep
// directories that are not hetpar's or are busy. Each ends in one clear
// error (or a recorded outcome), never a hang, a crash or lost results.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kHetpar = hetpar_binary();
const std::string kQuickstart = source_tree_path("/workloads/runs/quickstart.toml");

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t lines_of_text(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

std::string scratch(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/safety_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  return dir;
}

std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Starts `hetpar ARGS...` with stdout and stderr into `log` (a file, so
// stdio would buffer it fully unless hetpar flushes each line).
pid_t start(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> argv{const_cast<char*>(kHetpar.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `seconds` for `text` in `path`; true when it appeared.
bool wait_for_text(const std::string& path, const std::string& text, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (contains(text_of(path), text)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The pid of rank `rank` among the launcher's children (from their RANK variable); -1 if none.
pid_t rank_pid(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  for (pid_t child; children >> child;) {
    const std::string environ = text_of("/proc/" + std::to_string(child) + "/environ");
    if (contains(std::string(1, '\0') + environ, std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0')) {
      return child;
    }
  }
  return -1;
}

// `hetpar train` of the quickstart run with `args` exits 2 before launching anything, saying each of `says`.
void expect_refused_before_launch(const std::string& args, const std::vector<std::string>& says) {
  const auto t0 = Clock::now();
  const auto [code, out] = run_command(kHetpar + " train " + kQuickstart + args);
  EXPECT_EQ(code, 2) << out;
  for (const std::string& part : says) EXPECT_TRUE(contains(out, part)) << part << " missing from:\n" << out;
  EXPECT_FALSE(contains(out, "launching")) << out;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
}

TEST(Safety, AMistypedLayoutStartsNothing) {
  expect_refused_before_launch(" --set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1"
                               " --set layout.llm.dp=100000 --set data.global_batch_size=200000",
                               {"the layout needs 100000 ranks", "--oversubscribe"});
}

TEST(Safety, AModelTooLargeForMemoryIsRefusedUpFront) {
  expect_refused_before_launch(" --set llm.hidden=32768 --set llm.layers=64 --set llm.heads=64"
                               " --set llm.kv_heads=64 --set llm.ffn_hidden=65536",
                               {"cannot fit", "llm.hidden = 32768"});
}

TEST(Safety, OutputPathsAreCheckedBeforeTheFirstStep) {
  const std::string dir = scratch("paths");
  fs::create_directories(dir);
  std::ofstream(dir + "/a_file") << "x";
  expect_refused_before_launch(" --out /proc/hetpar-nowhere", {"--out: cannot create directory /proc/hetpar-nowhere"});
  expect_refused_before_launch(" --out " + dir + "/a_file", {"--out: " + dir + "/a_file exists and is not a directory"});
  expect_refused_before_launch(" --out " + dir + "/run --save-hf " + dir + "/a_file/model", {"--save-hf: cannot"});
}

// Results never replace a user's files: --out, --save-hf and calibrate's --out
// holding files hetpar did not write are refused before anything starts, the
// files untouched; a directory hetpar made takes a new run, which removes its
// own earlier outputs (so no stale summary is read as the new run's) and
// nothing else.
TEST(Safety, OutputsNeverReplaceAUsersFiles) {
  const std::string dir = scratch("users_files");
  fs::create_directories(dir + "/model");
  std::ofstream(dir + "/steps.jsonl") << "my own log\n";
  std::ofstream(dir + "/model/config.json") << "{\"mine\": true}\n";
  std::ofstream(dir + "/notes.json") << "my notes\n";
  expect_refused_before_launch(" --out " + dir, {"--out: " + dir + " holds " + dir + "/steps.jsonl", "choose another path"});
  expect_refused_before_launch(" --out " + dir + "/run --save-hf " + dir + "/model",
                               {"--save-hf: " + dir + "/model holds " + dir + "/model/config.json"});
  EXPECT_FALSE(fs::exists(dir + "/run"));  // refused before the run directory was made
  const auto [code, out] = run_command(kHetpar + " calibrate --out " + dir + "/notes.json");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "is not a hetpar profile")) << out;
  EXPECT_EQ(text_of(dir + "/steps.jsonl"), "my own log\n");
  EXPECT_EQ(text_of(dir + "/model/config.json"), "{\"mine\": true}\n");
  EXPECT_EQ(text_of(dir + "/notes.json"), "my notes\n");

  const std::string run = dir + "/run", train = kHetpar + " train " + kQuickstart + " --set run.steps=2 --out " + run;
  auto [first, first_out] = run_command(train);
  ASSERT_EQ(first, 0) << first_out;
  std::ofstream(run + "/profile_rank5.txt") << "an earlier run's profile";
  std::ofstream(run + "/notes.md") << "mine";
  auto [second, second_out] = run_command(train);
  EXPECT_EQ(second, 0) << second_out;
  EXPECT_FALSE(fs::exists(run + "/profile_rank5.txt"));
  EXPECT_EQ(text_of(run + "/notes.md"), "mine");
  EXPECT_EQ(lines_of(run + "/steps.jsonl").size(), 2u);
  fs::remove_all(dir);
}

// A full disk, as `ulimit -f` makes one: the run fails naming the file, and
// steps.jsonl keeps only complete records.
TEST(Safety, AFullDiskFailsTheRunNamingTheFile) {
  const std::string dir = scratch("full_disk");
  const auto [code, out] =
      run_command("ulimit -f 4 && " + kHetpar + " train " + kQuickstart + " --set run.steps=30 --out " + dir);
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(contains(out, dir + "/steps.jsonl: File too large")) << out;
  EXPECT_TRUE(contains(out, "rank 0 failed first")) << out;
  const std::vector<std::string> lines = lines_of(dir + "/steps.jsonl");
  ASSERT_FALSE(lines.empty());
  for (const std::string& line : lines) EXPECT_NO_THROW(nlohmann::json::parse(line)) << line;
  EXPECT_FALSE(fs::exists(dir + "/summary.json"));
}

TEST(Safety, ADivergingRunIsARecordedOutcome) {
  const std::string dir = scratch("diverged"), good = scratch("healthy");
  const std::string diverging = " --set optim.lr=1e6 --set optim.warmup_steps=0 --set optim.grad_clip=0.0";
  auto [code, out] = run_command(kHetpar + " train " + kQuickstart + diverging + " --set run.steps=6 --out " + dir);
  EXPECT_EQ(code, 5) << out;
  EXPECT_TRUE(contains(out, "the loss diverged at step")) << out;
  const nlohmann::json summary = nlohmann::json::parse(text_of(dir + "/summary.json"));
  EXPECT_EQ(summary["status"], "diverged");
  const int64_t at = summary["diverged_step"].get<int64_t>();
  const std::vector<std::string> lines = lines_of(dir + "/steps.jsonl");
  ASSERT_EQ(static_cast<int64_t>(lines.size()), at);
  EXPECT_TRUE(nlohmann::json::parse(lines.back())["diverged"].get<bool>());
  // compare names the diverged run and fails, whichever side it is on.
  ASSERT_EQ(run_command(kHetpar + " train " + kQuickstart + " --set run.steps=3 --out " + good).first, 0);
  std::tie(code, out) = run_command(kHetpar + " compare " + dir + " " + good);
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(contains(out, dir + " diverged at step " + std::to_string(at))) << out;
  EXPECT_EQ(run_command(kHetpar + " compare " + good + " " + dir).first, 1);
}

TEST(Safety, LaunchEnvironmentMistakesAreOneClearLine) {
  auto [code, out] = run_command("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=70000 " + kHetpar + " train " +
                                 kQuickstart);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "MASTER_PORT=\"70000\" is not an integer in [1, 65535]")) << out;
  // A peer that never comes, and a store nobody hosts: a short error, no C++ frames.
  for (const char* who : {"RANK=0", "RANK=1"}) {
    std::tie(code, out) = run_command(std::string(who) + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                                      std::to_string(40000 + getpid() % 20000) + " " + kHetpar + " train " + kQuickstart +
                                      " --set runtime.timeout_s=2 --out " + scratch("env"));
    EXPECT_NE(code, 0) << out;
    EXPECT_FALSE(contains(out, "frame #")) << out;
    EXPECT_FALSE(contains(out, "Exception raised from")) << out;
    EXPECT_LT(lines_of_text(out), 6u) << out;
    EXPECT_TRUE(contains(out, "error: ")) << out;
  }
}

// A rank that stops answering (SIGSTOP) is named, and the job ends within
// the collective timeout plus a small margin, not twice the timeout.
TEST(Safety, AStoppedRankIsNamedAndTheJobEndsInTime) {
  const std::string dir = scratch("stopped"), log = dir + ".log";
  const pid_t launcher = start({"train", kQuickstart, "--set", "run.steps=1000000", "--set", "runtime.timeout_s=4",
                                "--out", dir}, log);
  ASSERT_TRUE(wait_for_text(log, "step    2", 120)) << text_of(log);
  const pid_t rank1 = rank_pid(launcher, 1);
  ASSERT_GT(rank1, 0);
  const auto stopped_at = Clock::now();
  kill(rank1, SIGSTOP);
  int status = 0;
  waitpid(launcher, &status, 0);
  const double took = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  const std::string out = text_of(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  EXPECT_LT(took, 4.0 + 6.0) << out;  // the timeout, the launcher's margin, slack for a loaded machine
  EXPECT_TRUE(contains(out, "rank 1 stopped answering")) << out;
  EXPECT_TRUE(contains(out, "process state T")) << out;
}

// Into a file (fully buffered by stdio) the launcher's output still arrives
// line by line while the run goes on, so `| tee` and a killed launcher lose nothing.
TEST(Safety, LauncherOutputArrivesWhileTheRunGoesOn) {
  const std::string dir = scratch("buffering"), log = dir + ".log";
  const pid_t launcher = start({"train", kQuickstart, "--set", "run.steps=1000000", "--out", dir}, log);
  const bool arrived = wait_for_text(log, "[rank 0] step    1 ", 120);
  const bool still_running = waitpid(launcher, nullptr, WNOHANG) == 0;
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  EXPECT_TRUE(arrived) << text_of(log);
  EXPECT_TRUE(still_running);
}

TEST(Safety, SweepFreshNeverEmptiesAUsersDirectory) {
  const std::string dir = scratch("users_dir");
  fs::create_directories(dir);
  std::ofstream(dir + "/thesis.tex") << "precious";
  const auto [code, out] =
      run_command(kHetpar + " sweep " + test_data_path("/sweeps/two_points.toml") + " --fresh --out " + dir);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "was not made by hetpar sweep")) << out;
  EXPECT_EQ(text_of(dir + "/thesis.tex"), "precious");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(Safety, OneSweepPerDirectory) {
  const std::string dir = scratch("locked");
  fs::create_directories(dir);
  // Hold the directory as a running sweep would: its marker, locked.
  const int fd = open((dir + "/.hetpar-sweep").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string marker = "hetpar sweep directory\npid " + std::to_string(getpid()) + "\n";
  ASSERT_EQ(write(fd, marker.data(), marker.size()), static_cast<ssize_t>(marker.size()));
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  const auto [code, out] =
      run_command(kHetpar + " sweep " + test_data_path("/sweeps/two_points.toml") + " --out " + dir);
  close(fd);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "another sweep (pid " + std::to_string(getpid()) + ")")) << out;
  EXPECT_FALSE(fs::exists(dir + "/results.jsonl"));
}

}  // namespace
}  // namespace hetpar::test
