// A rank that dies or hangs must end the whole job, quickly and with a report:
// every rank exits non-zero, the launcher returns non-zero, nothing is left.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/dist_harness.hpp"
#include "util/exit_codes.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

constexpr int kTimeoutMs = 4000;

// One good all-reduce, then rank 2 vanishes while the others enter another.
HETPAR_WORKER(rank_exits_mid_collective) {
  at::Tensor t = at::ones({4});
  rt.world().all_reduce(t);
  require(t[0].item<float>() == rt.world_size(), "first all_reduce");
  if (rt.rank() == 2) _exit(7);
  for (int i = 0; i < 100; ++i) rt.world().all_reduce(t);
}

// Rank 1 vanishes; rank 0, a moment later, keeps sending to it point to
// point (a non-colocated encoder's rows): starting a send on the closed
// connection fails at once, which must still be a collective error.
HETPAR_WORKER(rank_exits_before_sends) {
  rt.world().barrier();
  if (rt.rank() == 1) _exit(7);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const at::Tensor rows = at::ones({256, 64});
  for (int i = 0; i < 200; ++i) rt.world().send(rows, 1, i);
}

// Rank 1 stops answering (alive, but never joins); the others must time out.
HETPAR_WORKER(rank_hangs) {
  if (rt.rank() == 1) std::this_thread::sleep_for(std::chrono::hours(1));
  at::Tensor t = at::ones({4});
  rt.world().all_reduce(t);
}

// A rank raising an error: its message must reach the launcher's report.
HETPAR_WORKER(rank_throws) {
  rt.world().barrier();
  if (rt.rank() == 1) throw std::runtime_error("injected failure on purpose");
  at::Tensor t = at::ones({4});
  rt.world().all_reduce(t);
}

// A zombie (dead, not yet reaped by whoever adopted it) counts as dead.
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

void expect_whole_job_failed(const LaunchResult& r, int culprit) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.first_failed, culprit) << describe_failure(r);
  for (const auto& rank : r.ranks) {
    EXPECT_TRUE(rank.exit_code != 0 || rank.signal != 0) << "rank " << rank.rank << " exited 0";
  }
}

TEST(Failures, RankExitsMidCollective) {
  WorkerOptions options;
  options.timeout_ms = kTimeoutMs;
  const LaunchResult r = run_workers("rank_exits_mid_collective", 4, options);
  expect_whole_job_failed(r, 2);
  EXPECT_EQ(r.ranks[2].exit_code, 7);
  EXPECT_LT(r.wall_seconds, 30.0);
  // The survivors noticed by themselves (a collective error), not by being killed.
  for (int rank : {0, 1, 3}) {
    EXPECT_EQ(r.ranks[rank].signal, 0) << r.ranks[rank].output;
    EXPECT_EQ(r.ranks[rank].exit_code, kExitCollectiveError) << r.ranks[rank].output;
    EXPECT_NE(r.ranks[rank].output.find("all_reduce on group world"), std::string::npos) << r.ranks[rank].output;
  }
}

TEST(Failures, ASendToAVanishedRankIsACollectiveError) {
  WorkerOptions options;
  options.timeout_ms = kTimeoutMs;
  const LaunchResult r = run_workers("rank_exits_before_sends", 2, options);
  expect_whole_job_failed(r, 1);
  EXPECT_EQ(r.ranks[0].signal, 0) << r.ranks[0].output;
  EXPECT_EQ(r.ranks[0].exit_code, kExitCollectiveError) << r.ranks[0].output;
  EXPECT_NE(r.ranks[0].output.find("send on group world"), std::string::npos) << r.ranks[0].output;
}

TEST(Failures, HungRankTimesOutThenIsKilled) {
  WorkerOptions options;
  options.timeout_ms = 2000;
  const LaunchResult r = run_workers("rank_hangs", 3, options);
  EXPECT_NE(r.exit_code, 0);
  // The blame goes to the rank that stopped answering, not to a healthy rank
  // whose collective timed out waiting for it.
  EXPECT_EQ(r.first_failed, 1) << describe_failure(r);
  EXPECT_TRUE(r.ranks[1].unresponsive);
  EXPECT_NE(describe_failure(r).find("rank 1 stopped answering"), std::string::npos) << describe_failure(r);
  EXPECT_TRUE(r.ranks[1].killed_by_launcher);
  EXPECT_EQ(r.ranks[1].signal, SIGKILL);
  for (int rank : {0, 2}) EXPECT_EQ(r.ranks[rank].exit_code, kExitCollectiveError) << r.ranks[rank].output;
  // Within the timeout plus the launcher's margin (and start-up), not a second timeout.
  EXPECT_LT(r.wall_seconds, 2.0 + 8.0);
}

TEST(Failures, ErrorMessageReachesTheReport) {
  WorkerOptions options;
  // The survivors learn of the loss from the closed connection, not a timeout:
  // a long one only keeps a slow start under load from failing the wrong rank.
  options.timeout_ms = 5 * kTimeoutMs;
  const LaunchResult r = run_workers("rank_throws", 3, options);
  expect_whole_job_failed(r, 1);
  const std::string report = describe_failure(r);
  EXPECT_NE(report.find("rank 1 failed first"), std::string::npos) << report;
  EXPECT_NE(report.find("injected failure on purpose"), std::string::npos) << report;
}

// The real binary: a rank lost mid-run ends `hetpar train` with a report.
TEST(Failures, TrainCommandReportsTheLostRank) {
  const std::string out = ::testing::TempDir() + "/fault_run_" + std::to_string(getpid());
  std::filesystem::remove_all(out);
  const auto [code, output] = run_command(
      "HETPAR_FAULT=1:2 " + hetpar_binary() + " train " + source_tree_path("/workloads/runs/quickstart.toml") +
      " --set runtime.timeout_s=4 --set run.steps=5 --out " + out);
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("rank 1 failed first with exit code 3"), std::string::npos) << output;
}

// Killing the launcher itself (SIGKILL: no chance to clean up) must not leave
// ranks behind: each rank dies with its parent.
TEST(Failures, NoRankOutlivesAKilledLauncher) {
  const std::string out = ::testing::TempDir() + "/orphan_run_" + std::to_string(getpid());
  std::filesystem::remove_all(out);
  const std::string hetpar = hetpar_binary(), run = source_tree_path("/workloads/runs/quickstart.toml");
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    execl(hetpar.c_str(), hetpar.c_str(), "train", run.c_str(), "--set", "run.steps=1000000", "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<pid_t> ranks;
  for (int i = 0; i < 100 && ranks.size() < 2; ++i) {  // wait for both ranks to start
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ranks.clear();
    std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
    for (pid_t pid; children >> pid;) ranks.push_back(pid);
  }
  ASSERT_EQ(ranks.size(), 2u);
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (pid_t pid : ranks) {
    // Orphans are re-parented to init, which reaps them: a dead rank is gone.
    EXPECT_FALSE(process_alive(pid)) << "rank pid " << pid << " outlived its launcher";
  }
}

}  // namespace
}  // namespace hetpar::test
