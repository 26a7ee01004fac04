// Checkpoints through the real binary: an interrupted-and-resumed run equals
// the uninterrupted one bit for bit; resumed under other layouts and
// placements it stays within 1e-5; old checkpoints are pruned; a truncated,
// corrupted, incomplete or mismatched checkpoint is refused before any rank
// starts (exit 2); a sweep point killed mid-run resumes from its checkpoint.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;

const std::string kHetpar = hetpar_binary();
const std::string kRun = source_tree_path("/workloads/runs/quickstart.toml");
const std::string kEight = " --set run.steps=8 --set run.checkpoint_every=3";  // checkpoints after steps 3 and 6

// A fresh directory of this test process, removed when the process ends.
std::string scratch(const std::string& name) {
  struct Made {
    std::vector<std::string> dirs;
    ~Made() {
      for (const std::string& dir : dirs) fs::remove_all(dir);
    }
  };
  static Made made;
  const std::string dir = ::testing::TempDir() + "/ckpt_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  made.dirs.push_back(dir);
  return dir;
}

std::vector<nlohmann::json> steps_of(const std::string& dir) {
  std::vector<nlohmann::json> steps;
  std::ifstream in(dir + "/steps.jsonl");
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line));
  return steps;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The run every case compares with, and one killed at step 5 (after the
// checkpoint of step 3), each made once per process.
struct Runs {
  std::string full, cut;
};
const Runs& runs() {
  static const Runs r = [] {
    Runs made{scratch("full"), scratch("cut")};
    const auto [full_code, full_out] = run_command(kHetpar + " train " + kRun + kEight + " --out " + made.full);
    EXPECT_EQ(full_code, 0) << full_out;
    const auto [cut_code, cut_out] = run_command("HETPAR_FAULT=1:5 " + kHetpar + " train " + kRun + kEight +
                                                 " --set runtime.timeout_s=5 --out " + made.cut);
    EXPECT_EQ(cut_code, 3) << cut_out;
    return made;
  }();
  return r;
}

// Over the 8 steps of a resumed run, its largest relative loss difference from the uninterrupted run.
double max_relative_loss_difference_from_full(const std::vector<nlohmann::json>& resumed) {
  const auto full = steps_of(runs().full);
  double worst = 0;
  for (size_t i = 0; i < 8; ++i) {
    worst = std::max(worst, std::abs(double(resumed[i]["loss"]) - double(full[i]["loss"])) / double(full[i]["loss"]));
  }
  return worst;
}

// A copy of the interrupted run, so each case resumes from the same state.
std::string copy_of_cut(const std::string& name) {
  const std::string dir = scratch(name);
  fs::copy(runs().cut, dir, fs::copy_options::recursive);
  return dir;
}

TEST(Checkpoint, AResumedRunEqualsTheUninterruptedOneBitForBit) {
  const std::string dir = copy_of_cut("bitexact");
  ASSERT_TRUE(fs::exists(dir + "/checkpoints/step_00000003/manifest.json"));
  ASSERT_EQ(steps_of(dir).size(), 4u);  // steps 1-4 ran before the fault at 5
  const auto [code, out] = run_command(kHetpar + " train " + kRun + kEight + " --resume " + dir);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "resuming from " + dir + "/checkpoints/step_00000003 at step 4")) << out;
  const auto full = steps_of(runs().full), resumed = steps_of(dir);
  ASSERT_EQ(resumed.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(resumed[i]["step"], full[i]["step"]);
    EXPECT_EQ(resumed[i]["loss"].dump(), full[i]["loss"].dump()) << "step " << i + 1;  // to the last bit
    EXPECT_EQ(resumed[i]["grad_norm"].dump(), full[i]["grad_norm"].dump()) << "step " << i + 1;
  }
  // The newest two complete checkpoints are kept (run.checkpoint_keep = 2): steps 3 and 6.
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_00000006/manifest.json"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_00000003/manifest.json"));
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(dir + "/summary.json"));
  EXPECT_EQ(summary["steps"], 8);
}

TEST(Checkpoint, OldCheckpointsArePruned) {
  const std::string dir = scratch("prune");
  const auto [code, out] = run_command(kHetpar + " train " + kRun +
                                       " --set run.steps=8 --set run.checkpoint_every=2 --set run.checkpoint_keep=2 --out " + dir);
  ASSERT_EQ(code, 0) << out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_00000006", "step_00000008"}));
}

struct LayoutCase {
  const char* name;
  const char* sets;
};
void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

class ResumeUnderAnotherLayout : public ::testing::TestWithParam<LayoutCase> {};

// Written colocated (encoder DP2, LLM TP2); resharded by parameter name into each layout.
TEST_P(ResumeUnderAnotherLayout, StaysWithin1e5OfTheUninterruptedRun) {
  const std::string dir = copy_of_cut(GetParam().name), out_dir = scratch(std::string(GetParam().name) + "_out");
  const auto [code, out] = run_command(kHetpar + " train " + kRun + kEight + " --resume " + dir + " --out " + out_dir +
                                       " " + GetParam().sets);
  ASSERT_EQ(code, 0) << out;
  const auto resumed = steps_of(out_dir);
  ASSERT_EQ(resumed.size(), 8u);
  const double worst = max_relative_loss_difference_from_full(resumed);
  std::printf("%s: max relative loss difference %.3g\n", GetParam().name, worst);
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(steps_of(dir).size(), 4u) << "--out elsewhere leaves the resumed run's own steps alone";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ResumeUnderAnotherLayout,
    ::testing::Values(
        LayoutCase{"uniform_one_rank", "--set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1"},
        LayoutCase{"uniform_dp2", "--set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1 "
                                  "--set layout.llm.dp=2 --set data.micro_batch_size=1"},
        LayoutCase{"noncolocated_1_to_tp2", "--set layout.placement=non-colocated --set layout.encoder.dp=1"},
        LayoutCase{"colocated_encoder_tp2", "--set layout.encoder.tp=2 --set layout.encoder.dp=1 --set layout.llm.tp=1 "
                                            "--set layout.llm.dp=2 --set data.micro_batch_size=1"},
        LayoutCase{"uniform_pp2", "--set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1 "
                                  "--set layout.llm.pp=2"},
        LayoutCase{"uniform_dp2_sharded_state", "--set layout.placement=uniform --set layout.encoder.dp=1 "
                                                "--set layout.llm.tp=1 --set layout.llm.dp=2 --set data.micro_batch_size=1 "
                                                "--set optim.shard_state=true --set runtime.grad_bucket_mib=0.01"}),
    [](const auto& info) { return std::string(info.param.name); });

// Written by a pipeline (each stage's rank holds its layers), read by one rank:
// each parameter is found on the writer's rank of its stage.
// Written under a pipelined layout (each parameter by the stage that holds
// it), cut at step 5 by a dead rank, resumed on one rank.
void expect_resumes_on_one_rank(const std::string& tag, const std::string& layout) {
  const std::string dir = scratch(tag + "_cut"), out_dir = scratch(tag + "_resumed");
  auto [code, out] = run_command("HETPAR_FAULT=1:5 " + kHetpar + " train " + kRun + kEight + layout +
                                 " --set runtime.timeout_s=5 --out " + dir);
  ASSERT_EQ(code, 3) << out;
  std::tie(code, out) = run_command(kHetpar + " train " + kRun + kEight + " --resume " + dir + " --out " + out_dir +
                                    " --set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1");
  ASSERT_EQ(code, 0) << out;
  const auto resumed = steps_of(out_dir);
  ASSERT_EQ(resumed.size(), 8u);
  const double worst = max_relative_loss_difference_from_full(resumed);
  std::printf("written under %s, resumed on one rank: max relative loss difference %.3g\n", tag.c_str(), worst);
  EXPECT_LE(worst, 1e-5);
}

TEST(Checkpoint, APipelinedCheckpointResumesOnOneRank) {
  expect_resumes_on_one_rank("uniform_pp2",
                             " --set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1 --set layout.llm.pp=2");
}

TEST(Checkpoint, AnEncoderPipelinedCheckpointResumesOnOneRank) {
  expect_resumes_on_one_rank("encoder_pp2_llm_pp2", " --set layout.placement=non-colocated --set layout.encoder.pp=2 "
                                                    "--set layout.encoder.dp=1 --set layout.llm.tp=1 --set layout.llm.pp=2");
}

// Written with the optimizer state sharded over DP 2 (small buckets, so
// that segments cut parameters), cut at step 5: resumed sharded, the run is
// the uninterrupted sharded run to the bit; resumed unsharded (the files hold
// every parameter's whole state either way), its losses are the same bits too.
TEST(Checkpoint, AShardedStateCheckpointResumesShardedOrNot) {
  const std::string layout = " --set layout.placement=uniform --set layout.encoder.dp=1 --set layout.llm.tp=1 "
                             "--set layout.llm.dp=2 --set data.micro_batch_size=1 --set optim.shard_state=true "
                             "--set runtime.grad_bucket_mib=0.01";
  const std::string full = scratch("sharded_full"), cut = scratch("sharded_cut");
  auto [code, out] = run_command(kHetpar + " train " + kRun + kEight + layout + " --out " + full);
  ASSERT_EQ(code, 0) << out;
  std::tie(code, out) = run_command("HETPAR_FAULT=1:5 " + kHetpar + " train " + kRun + kEight + layout +
                                    " --set runtime.timeout_s=5 --out " + cut);
  ASSERT_EQ(code, 3) << out;
  for (const bool shard : {true, false}) {
    const std::string dir = scratch(shard ? "sharded_resumed" : "sharded_resumed_unsharded");
    fs::copy(cut, dir, fs::copy_options::recursive);
    std::tie(code, out) = run_command(kHetpar + " train " + kRun + kEight + layout + " --resume " + dir +
                                      (shard ? "" : " --set optim.shard_state=false"));
    ASSERT_EQ(code, 0) << out;
    const auto expected = steps_of(full), resumed = steps_of(dir);
    ASSERT_EQ(resumed.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(resumed[i]["loss"].dump(), expected[i]["loss"].dump()) << "shard " << shard << " step " << i + 1;
      if (shard) EXPECT_EQ(resumed[i]["grad_norm"].dump(), expected[i]["grad_norm"].dump()) << "step " << i + 1;
    }
  }
}

// Damage of every kind is refused before any rank starts, naming the problem.
TEST(Checkpoint, ABrokenOrForeignCheckpointIsRefused) {
  const std::string resume = kHetpar + " train " + kRun + kEight + " --resume ";
  auto expect_refused = [&](const std::string& dir, const std::string& extra, const std::string& says) {
    const auto [code, out] = run_command(resume + dir + extra);
    EXPECT_EQ(code, 2) << out;
    EXPECT_TRUE(contains(out, says)) << says << " missing from:\n" << out;
    EXPECT_FALSE(contains(out, "launching")) << out;
  };
  const std::string file = "/checkpoints/step_00000003/rank_00001.safetensors";
  const std::string truncated = copy_of_cut("truncated");
  fs::resize_file(truncated + file, fs::file_size(truncated + file) / 2);
  expect_refused(truncated, "", "truncated or replaced");

  const std::string flipped = copy_of_cut("flipped");
  {
    std::fstream f(flipped + file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(flipped + file) - 5));
    f.put('\x7f');
  }
  expect_refused(flipped, "", "corrupted");

  const std::string incomplete = copy_of_cut("incomplete");
  fs::remove(incomplete + "/checkpoints/step_00000003/manifest.json");
  expect_refused(incomplete, "", "no complete checkpoint");

  expect_refused(copy_of_cut("foreign"), " --set llm.hidden=128", "differ in llm.hidden: 64 in the checkpoint, 128 now");
  const std::string edited = copy_of_cut("edited");
  std::ofstream(edited + "/checkpoints/step_00000003/config.toml", std::ios::app) << "# edited\n";
  expect_refused(edited, "", "config.toml: content differs from the manifest's hash");
  expect_refused(copy_of_cut("reseeded"), " --set run.seed=5", "differ in run.seed");
  expect_refused(scratch("nowhere"), "", "no complete checkpoint");

  // The record of the steps before the checkpoint is checked before any rank
  // starts too, and a refusal leaves the directory as it was.
  const std::string unrecorded = copy_of_cut("unrecorded");
  fs::remove(unrecorded + "/steps.jsonl");
  expect_refused(unrecorded, "", "steps.jsonl is missing");
  const std::string garbled = copy_of_cut("garbled");
  {
    const auto steps = steps_of(garbled);
    std::ofstream out(garbled + "/steps.jsonl");
    out << steps[0].dump() << "\nnot a record\n" << steps[2].dump() << "\n";
  }
  std::ofstream(garbled + "/summary.json") << "{}";  // as a run that ended would leave it
  expect_refused(garbled, "", "steps.jsonl:2: not a step record");
  EXPECT_TRUE(fs::exists(garbled + "/summary.json"));
  const std::string gap = copy_of_cut("gap");
  {
    const auto steps = steps_of(gap);
    std::ofstream(gap + "/steps.jsonl") << steps[0].dump() << "\n" << steps[2].dump() << "\n";
  }
  expect_refused(gap, "", "step 3 follows step 1");
  expect_refused(copy_of_cut("with_hf"), " --init-hf " + gap, "--init-hf: not with --resume");
}

// A torn last record (a writer killed mid-line) is left out, and the resumed
// run goes on from its checkpoint as if it had not been written.
TEST(Checkpoint, ATornLastStepRecordIsLeftOutOnResume) {
  const std::string dir = copy_of_cut("torn");
  std::ofstream(dir + "/steps.jsonl", std::ios::app) << R"({"step": 6, "lo)";
  const auto [code, out] = run_command(kHetpar + " train " + kRun + kEight + " --resume " + dir);
  ASSERT_EQ(code, 0) << out;
  const auto resumed = steps_of(dir);
  ASSERT_EQ(resumed.size(), 8u);
  EXPECT_EQ(max_relative_loss_difference_from_full(resumed), 0.0);
}

// A refused command (here an export directory that cannot be made) leaves
// the earlier run in --out as it was: nothing is removed before every check
// has passed.
TEST(Checkpoint, ARefusedCommandLeavesTheEarlierRunInPlace) {
  const std::string dir = scratch("refused"), blocker = scratch("blocker");
  std::ofstream(blocker) << "a file, not a directory";
  const auto [first, first_out] = run_command(kHetpar + " train " + kRun + " --set run.steps=1 --out " + dir);
  ASSERT_EQ(first, 0) << first_out;
  const auto [code, out] =
      run_command(kHetpar + " train " + kRun + " --set run.steps=1 --out " + dir + " --save-hf " + blocker + "/hf");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "--save-hf")) << out;
  for (const char* kept : {"config.toml", "steps.jsonl", "summary.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/" + kept)) << kept << " was removed by a refused command";
  }
}

// A sweep killed while a point runs picks that point up at its checkpoint.
TEST(Checkpoint, ASweepPointKilledMidRunResumesFromItsCheckpoint) {
  const std::string out = scratch("sweep");
  const std::string sweep = test_data_path("/sweeps/two_points.toml");
  const std::string sets = " --set run.steps=40 --set run.checkpoint_every=5 --no-plots --out " + out;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    // exec the sweep itself (no shell in between), so that the kill below hits the sweep
    execl(kHetpar.c_str(), kHetpar.c_str(), "sweep", sweep.c_str(), "--set", "run.steps=40", "--set",
          "run.checkpoint_every=5", "--no-plots", "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill the sweep once the first run (the baseline) has a checkpoint but has not finished.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(out + "/runs/b001/checkpoints/step_00000010/manifest.json") &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(fs::exists(out + "/runs/b001/checkpoints/step_00000010/manifest.json"));
  ASSERT_FALSE(fs::exists(out + "/runs/b001/summary.json")) << "the run finished before the kill: nothing to resume";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its ranks die with it
  const auto [code, output] = run_command(kHetpar + " sweep " + sweep + sets);
  ASSERT_EQ(code, 0) << output;
  std::ifstream log(out + "/runs/b001/train.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "resuming from " + out + "/runs/b001/checkpoints/step_000000")) << text;
  EXPECT_EQ(steps_of(out + "/runs/b001").size(), 40u);
}

}  // namespace
}  // namespace hetpar::test
