// The real `hetpar` binary from the outside: help, bad input (exit 2, nothing
// started), and the launch routes other than the local launcher: torchrun's
// agent store and Slurm's variables with rank 0 hosting the store.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

const std::string kHetpar = hetpar_binary();
const std::string kQuickstart = source_tree_path("/workloads/runs/quickstart.toml");

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(Cli, TrainHelpDocumentsTheRunFile) {
  const auto [code, out] = run_command(kHetpar + " train --help");
  EXPECT_EQ(code, 0) << out;
  for (const char* part : {"THE RUN FILE", "[layout.encoder]", "placement", "include", "--set", "--nproc"}) {
    EXPECT_TRUE(contains(out, part)) << part << " missing from:\n" << out;
  }
}

TEST(Cli, UnknownSubcommandOrOptionIsAUsageError) {
  EXPECT_EQ(run_command(kHetpar + " fly").first, 2);
  EXPECT_EQ(run_command(kHetpar + " train " + kQuickstart + " --bogus").first, 2);
  EXPECT_EQ(run_command(kHetpar + " train " + kQuickstart + " --nproc 0").first, 2);
}

// A config error is reported once, with file and key, before any rank starts.
TEST(Cli, BadConfigExitsTwoBeforeLaunching) {
  const auto [code, out] = run_command(kHetpar + " train " + kQuickstart + " --set layout.llm.tp=3 --set layout.encoder.dp=3");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "layout.llm.tp = 3")) << out;
  EXPECT_TRUE(contains(out, "tiny.toml: llm.heads")) << out;
  EXPECT_FALSE(contains(out, "launching")) << out;
  EXPECT_FALSE(contains(out, "[rank")) << out;
}

// What the trainer cannot run yet is refused up front, not half-run.
TEST(Cli, UnsupportedCombinationsAreRefused) {
  auto [code, out] = run_command(kHetpar + " train " + kQuickstart +
                                 " --set layout.encoder.dp=1 --set layout.encoder.tp=2 --set layout.llm.tp=1 --set layout.llm.pp=2");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "layout.encoder.tp") && contains(out, "an encoder tp group stays inside one stage")) << out;
  std::tie(code, out) = run_command(kHetpar + " train " + kQuickstart +
                                    " --set layout.placement=colocated --set layout.encoder.pp=2 --set layout.encoder.dp=1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "layout.encoder.pp") && contains(out, "encoder pipeline parallelism needs the non-colocated placement")) << out;
  std::tie(code, out) = run_command(kHetpar + " train " + kQuickstart +
                                    " --set layout.placement=non-colocated --set layout.encoder.cp=2");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "layout.encoder.cp") && contains(out, "the encoder takes no context parallelism")) << out;
}

TEST(Cli, MissingRunFileExitsTwo) {
  const auto [code, out] = run_command(kHetpar + " train /nonexistent/run.toml");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "/nonexistent/run.toml")) << out;
}

TEST(Cli, WrongRankCountExitsTwo) {
  const auto [code, out] = run_command(kHetpar + " train " + kQuickstart + " --nproc 3");
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "needs 2 ranks")) << out;
  EXPECT_TRUE(contains(out, "3 were launched")) << out;
}

TEST(Cli, BadLaunchEnvironmentExitsTwo) {
  const auto [code, out] = run_command("RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " + kHetpar +
                                       " train " + kQuickstart);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "rank 5 is not below world size 2")) << out;
}

TEST(Cli, LocalRunWritesResults) {
  const std::string dir = ::testing::TempDir() + "/cli_local";
  std::filesystem::remove_all(dir);
  const auto [code, out] = run_command(kHetpar + " train " + kQuickstart + " --set run.steps=3 --out " + dir);
  ASSERT_EQ(code, 0) << out;
  std::ifstream steps(dir + "/steps.jsonl");
  int lines = 0;
  for (std::string line; std::getline(steps, line);) ++lines;
  EXPECT_EQ(lines, 3);
  EXPECT_TRUE(std::filesystem::exists(dir + "/summary.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/config.toml"));
}

// Sequence parallelism asked for at tp 1 runs without it, says so, and records the layout it ran.
TEST(Cli, SequenceParallelAtTp1IsANoOpItSays) {
  const std::string dir = ::testing::TempDir() + "/cli_sp_tp1";
  std::filesystem::remove_all(dir);
  const auto [code, out] =
      run_command(kHetpar + " train " + source_tree_path("/workloads/tiny.toml") +
                  " --set run.steps=1 --set layout.llm.sp=true --out " + dir);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "warning: layout.llm.sp has no effect at layout.llm.tp = 1")) << out;
  std::ifstream summary(dir + "/summary.json");
  EXPECT_EQ(nlohmann::json::parse(summary)["layout_llm"], "tp1.cp1.pp1.dp1");
}

// runtime.profile_step: every rank writes the step's op-level trace and table.
TEST(Cli, ProfileStepWritesAnOpTablePerRank) {
  const std::string dir = ::testing::TempDir() + "/cli_profile_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const auto [code, out] = run_command(kHetpar + " train " + kQuickstart + " --set run.steps=3 --set runtime.profile_step=2 --out " + dir);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "op profile of step 2 on rank 0")) << out;
  for (int rank : {0, 1}) {
    std::ifstream table(dir + "/profile_rank" + std::to_string(rank) + ".txt");
    const std::string text((std::istreambuf_iterator<char>(table)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(text, "aten::mm")) << text;
    EXPECT_TRUE(contains(text, "self ms")) << text;
    EXPECT_GT(std::filesystem::file_size(dir + "/profile_rank" + std::to_string(rank) + ".json"), 1000u);
  }
}

// `compare`: within tolerance -> 0, past it -> 1, unreadable -> 2.
TEST(Cli, CompareExitCodes) {
  const std::string dir = ::testing::TempDir() + "/compare_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::vector<double>& losses) {
    std::ofstream out(dir + "/" + name);
    for (size_t i = 0; i < losses.size(); ++i) out << "{\"step\": " << i + 1 << ", \"loss\": " << losses[i] << "}\n";
    return dir + "/" + name;
  };
  const std::string ref = write("ref.jsonl", {6.0, 5.0, 4.0});
  const std::string close = write("close.jsonl", {6.0, 5.00001, 4.0});  // 2e-6 relative at step 2
  const std::string far = write("far.jsonl", {6.0, 5.0, 4.1});          // 2.5e-2 relative at step 3
  auto [code, out] = run_command(kHetpar + " compare " + close + " " + ref);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "3 steps compared")) << out;
  std::tie(code, out) = run_command(kHetpar + " compare " + far + " " + ref);
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(contains(out, "(step 3)")) << out;
  EXPECT_EQ(run_command(kHetpar + " compare " + far + " " + ref + " --rtol 0.03").first, 0);
  // Held-out losses, where both runs evaluated a step, are held to the same tolerance.
  std::ofstream(dir + "/eval_ref.jsonl") << R"({"step": 1, "loss": 6.0, "eval_loss": 5.5})" "\n"
                                         << R"({"step": 2, "loss": 5.0})" "\n";
  std::ofstream(dir + "/eval_far.jsonl") << R"({"step": 1, "loss": 6.0, "eval_loss": 5.6})" "\n"
                                         << R"({"step": 2, "loss": 5.0})" "\n";
  std::tie(code, out) = run_command(kHetpar + " compare " + dir + "/eval_far.jsonl " + dir + "/eval_ref.jsonl");
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(contains(out, "1 held-out evaluations compared")) << out;
  EXPECT_TRUE(contains(out, "EXCEEDED")) << out;
  std::tie(code, out) = run_command(kHetpar + " compare " + dir + "/eval_ref.jsonl " + dir + "/eval_ref.jsonl");
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) = run_command(kHetpar + " compare " + close + " " + ref);
  EXPECT_FALSE(contains(out, "held-out")) << out;  // neither evaluated
  EXPECT_EQ(run_command(kHetpar + " compare " + dir + "/missing.jsonl " + ref).first, 2);
  std::ofstream(dir + "/bad.jsonl") << "{\"step\": 1}\n";
  std::tie(code, out) = run_command(kHetpar + " compare " + dir + "/bad.jsonl " + ref);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "bad.jsonl:1")) << out;
}

// Slurm: ranks from SLURM_PROCID/SLURM_NTASKS; rank 0 hosts the store.
TEST(Cli, SlurmVariablesWithRankZeroHostingTheStore) {
  const std::string dir = ::testing::TempDir() + "/cli_slurm_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const std::string common = "SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                             " " + kHetpar + " train " + kQuickstart + " --set run.steps=2 --out " + dir;
  const auto [code, out] = run_command("(SLURM_PROCID=1 SLURM_LOCALID=1 " + common + " & SLURM_PROCID=0 " + common +
                                       "; s0=$?; wait $!; s1=$?; exit $((s0 + s1)))");
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "launched by slurm")) << out;
  EXPECT_TRUE(contains(out, "done: 2 steps")) << out;
}

// torchrun from the pinned wheel's venv, with its agent store.
TEST(Cli, TorchrunNoPython) {
  const std::string torchrun = torchrun_binary();
  ASSERT_TRUE(std::filesystem::exists(torchrun)) << "the torch venv has no " << torchrun;
  const std::string dir = ::testing::TempDir() + "/cli_torchrun_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  // torchrun leaves a log directory in TMPDIR: under the tests' scratch, not /tmp.
  const auto [code, out] = run_command("TMPDIR=" + ::testing::TempDir() + " " + torchrun + " --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                                       " --no-python " + kHetpar + " train " + kQuickstart +
                                       " --set run.steps=2 --out " + dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "launched by torchrun")) << out;
  EXPECT_TRUE(contains(out, "done: 2 steps")) << out;
}

}  // namespace
}  // namespace hetpar::test

namespace hetpar::test {
namespace {

// hetpar plan: its files from a good run, one clear exit-2 message for each bad input.
TEST(Cli, PlanWritesItsFilesAndRefusesBadInput) {
  const std::string dir = ::testing::TempDir() + "/plan_cli_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const std::string tiny = source_tree_path("/workloads/tiny.toml");
  const std::string h100 = source_tree_path("/profiles/h100_dgx.json");
  const std::string plan = hetpar_binary() + " plan " + tiny + " ";
  auto [code, out] = run_command(plan + "--devices 4 --profile " + h100 + " --top 3 --label llm=tiny --out " + dir);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("best   uniform"), std::string::npos) << out;
  EXPECT_NE(out.find("hetpar sweep " + dir + "/sweep.toml"), std::string::npos) << out;
  for (const char* file : {"plan.json", "sweep.toml", "base.toml"}) EXPECT_TRUE(std::filesystem::exists(dir + "/" + file)) << file;
  std::ifstream in(dir + "/plan.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["format"], "hetpar-plan/1");
  EXPECT_EQ(j["llm"], "tiny");
  EXPECT_EQ(j["top"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["best"]["uniform"]["speedup_tokens"].get<double>(), 1.0);

  const std::pair<std::string, std::string> bad[] = {
      {"--devices 4 --profile " + dir + "/no_such_profile.json", "cannot read the profile"},
      {"--devices 4 --profile " + tiny, "not JSON"},
      {"--devices 4 --profile " + dir, dir + ": a directory, not a profile file"},
      {"--devices 0 --profile " + h100, "--devices"},
      {"--devices 4 --profile " + h100 + " --objective throughput", "--objective"},
      {"--devices 4 --profile " + h100 + " --set llm.hiden=64", "llm.hiden"},
      {"--devices 4 --profile " + h100 + " --set run.precision=fp32", "run.precision = \"fp32\", but the profile measures bf16"},
      {"--devices 4 --profile " + h100 + " --label =x", "--label"},
      {"--devices 4 --profile " + h100 + " --set data.files=" + dir + "/no_such_files", "data.files: " + dir + "/no_such_files: not a directory"},
      // A 70-billion-parameter-sized LLM cannot fit 4 devices of 80 GB with unsharded optimizer state.
      {"--devices 4 --profile " + h100 + " --set llm.hidden=8192 --set llm.layers=80 --set llm.heads=64 --set "
       "llm.kv_heads=8 --set llm.ffn_hidden=28672 --set llm.vocab_size=128256",
       "fits the profile's memory"}};
  for (const auto& [args, says] : bad) {
    std::tie(code, out) = run_command(plan + args + " --out " + dir + "_bad");
    EXPECT_EQ(code, 2) << args << "\n" << out;
    EXPECT_NE(out.find(says), std::string::npos) << args << "\n" << out;
    // A refused plan leaves nothing behind, not even its folder.
    EXPECT_FALSE(std::filesystem::exists(dir + "_bad")) << args;
  }
  std::tie(code, out) = run_command(hetpar_binary() + " plan " + dir + "/missing.toml --devices 4");
  EXPECT_EQ(code, 2) << out;
  // An earlier plan's files are replaced; a folder holding someone else's sweep.toml is refused, the file untouched.
  std::tie(code, out) = run_command(plan + "--devices 2 --profile " + h100 + " --out " + dir);
  EXPECT_EQ(code, 0) << out;
  const std::string mine = dir + "_mine";
  std::filesystem::create_directories(mine);
  std::ofstream(mine + "/sweep.toml") << "# my own sweep\n";
  std::tie(code, out) = run_command(plan + "--devices 2 --profile " + h100 + " --out " + mine);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find(mine + "/sweep.toml, which hetpar plan would replace"), std::string::npos) << out;
  std::ifstream kept(mine + "/sweep.toml");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>()), "# my own sweep\n");
  EXPECT_FALSE(std::filesystem::exists(mine + "/plan.json"));
  std::filesystem::remove_all(mine);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir + "_bad");
}

}  // namespace
}  // namespace hetpar::test
