// Nothing lost, nothing written where it should not be: plain names, files
// written whole or not at all, run and export directories that never replace
// a user's files (and one run at a time), sweep directories hetpar alone may
// empty (and one sweep at a time), crash-safe idempotent resume, and the bounds on what
// a local launch may start.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "config/run_config.hpp"
#include "launch/local_limits.hpp"
#include "metrics/results_csv.hpp"
#include "sweep/sweep_dir.hpp"
#include "sweep/sweep_resume.hpp"
#include "train/run_dir.hpp"
#include "util/durable_file.hpp"
#include "util/output_dir.hpp"
#include "util/plain_name.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "hetpar_safe_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~Scratch() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(PlainName, AcceptsLabelsAndRefusesPaths) {
  for (const char* ok : {"cpu-default", "tiny_tp2_dp2", "all \"keys\" run", "v1.2", "p001"}) {
    EXPECT_EQ(plain_name_problem(ok), "") << ok;
  }
  for (const char* bad : {"", ".", "..", "../..", "a/b", "/etc", "a\\b", "x..y", "-rf", " pad", "pad ", "tab\there"}) {
    EXPECT_NE(plain_name_problem(bad), "") << bad;
  }
  EXPECT_NE(plain_name_problem(std::string(129, 'a')), "");
}

TEST(DurableFile, AtomicWriteReplacesWholeAndNamesThePathOnFailure) {
  Scratch dir;
  const std::string path = dir / "summary.json";
  write_file_atomic(path, "first\n");
  write_file_atomic(path, "second\n");
  EXPECT_EQ(text_of(path), "second\n");
  try {
    write_file_atomic(dir / "no/such/dir/summary.json", "x");
    FAIL() << "wrote into a missing directory";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/summary.json"), std::string::npos) << e.what();
  }
  for (const auto& entry : fs::directory_iterator(dir / "")) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << "left " << entry.path();
  }
}

// A full disk, for real: /dev/full accepts an open and refuses every write.
TEST(DurableFile, AppendToAFullDiskIsAnErrorNamingTheFile) {
  AppendFile full("/dev/full", false);
  try {
    full.append_line("{\"step\": 1}");
    FAIL() << "a write to a full device succeeded";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
}

// Past the file-size limit (RLIMIT_FSIZE, as `ulimit -f` sets it) a write
// fails mid-way: the file keeps its complete lines and nothing more, and the
// old content of an atomically written file survives.
TEST(DurableFile, AWriteCutShortLeavesOnlyCompleteRecords) {
  Scratch dir;
  const std::string log = dir / "steps.jsonl", summary = dir / "summary.json";
  write_file_atomic(summary, "old\n");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{100, 100};
    setrlimit(RLIMIT_FSIZE, &limit);
    AppendFile steps(log, true);
    int written = 0;
    try {
      for (; written < 100; ++written) steps.append_line(std::string(30, 'x'));  // 31 bytes a line
    } catch (const FileError& e) {
      if (std::string(e.what()).find("File too large") == std::string::npos) _exit(10);
    }
    try {
      write_file_atomic(summary, std::string(500, 'y'));
      _exit(11);
    } catch (const FileError&) {
    }
    _exit(written == 3 ? 0 : 12);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string line = std::string(30, 'x') + "\n";
  EXPECT_EQ(text_of(log), line + line + line);
  EXPECT_EQ(text_of(summary), "old\n");
}

// The PID of a process that has ended (and been reaped): a killed writer's.
std::string ended_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return std::to_string(child);
}

// What a killed write left (NAME.tmp.PID of a writer gone) goes; a live
// writer's temporary, a link and a user's file that only looks alike stay.
TEST(DurableFile, StaleTemporariesOfEndedWritersAreRemoved) {
  Scratch dir;
  const std::string dead = dir / ("model.safetensors.tmp." + ended_pid()), live = dir / ("config.json.tmp." + std::to_string(getpid()));
  write_text(dead, "half");
  write_text(live, "being written");
  write_text(dir / "notes.tmp.txt", "mine");
  write_text(dir / "outside", "keep");
  fs::create_symlink(dir / "outside", dir / ("link.tmp." + ended_pid()));
  EXPECT_EQ(remove_stale_temporaries(dir / ""), std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  for (const char* kept : {"notes.tmp.txt", "outside"}) EXPECT_TRUE(fs::exists(dir / kept)) << kept;
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(remove_stale_temporaries(dir / "no_such_dir"), std::vector<std::string>{});
}

TEST(DurableFile, UnusableOutputDirectoriesAreRefused) {
  Scratch dir;
  EXPECT_NO_THROW(ensure_writable_dir(dir / "a/b/c"));
  EXPECT_TRUE(fs::is_directory(dir / "a/b/c"));
  EXPECT_TRUE(fs::is_empty(dir / "a/b/c"));  // the probe is gone
  write_text(dir / "file", "x");
  EXPECT_THROW(ensure_writable_dir(dir / "file"), FileError);
  EXPECT_THROW(ensure_writable_dir("/proc/hetpar-cannot-be-here"), FileError);
}

// ---- run and export directories ---------------------------------------------------

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(OutputDir, AUsersFileOfAnOutputsNameIsNeverReplaced) {
  Scratch dir;
  const std::string users = dir / "users";
  fs::create_directories(users);
  EXPECT_EQ(output_dir_problem(dir / "absent", run_outputs()), "");
  EXPECT_EQ(output_dir_problem(users, run_outputs()), "");  // empty
  write_text(users + "/notes.md", "mine");
  write_text(users + "/run.toml", "mine");  // a run file beside its results is not an output's name
  EXPECT_EQ(output_dir_problem(users, run_outputs()), "");
  for (const std::string name : {"steps.jsonl", "profile_rank3.txt"}) {
    write_text(users + "/" + name, "mine");
    const std::string why = output_dir_problem(users, run_outputs());
    EXPECT_NE(why.find(users + "/" + name + ", which hetpar train would replace"), std::string::npos) << why;
    EXPECT_NE(why.find("no .hetpar-run marker"), std::string::npos) << why;
    fs::remove(users + "/" + name);
  }
  write_text(users + "/config.json", "{}");
  EXPECT_EQ(output_dir_problem(users, run_outputs()), "");
  EXPECT_NE(output_dir_problem(users, hf_export_outputs()).find("hetpar train --save-hf would replace"),
            std::string::npos);
  // A marker that is a link is not hetpar's marker.
  fs::create_symlink(users + "/notes.md", users + "/.hetpar-hf-export");
  EXPECT_NE(output_dir_problem(users, hf_export_outputs()), "");
  fs::remove(users + "/.hetpar-hf-export");
  mark_output_dir(users, hf_export_outputs());
  EXPECT_EQ(output_dir_problem(users, hf_export_outputs()), "");
  EXPECT_EQ(text_of(users + "/config.json"), "{}");
  write_text(dir / "a_file", "x");
  EXPECT_NE(output_dir_problem(dir / "a_file", run_outputs()).find("is not a directory"), std::string::npos);
}

TEST(RunDir, AFreshRunRemovesOnlyItsOwnEarlierOutputs) {
  Scratch dir;
  const std::string run = dir / "run", outside = dir / "outside";
  fs::create_directories(outside);
  write_text(outside + "/keep.txt", "keep");
  { RunDirClaim first(run, false); }
  for (const char* name : {"config.toml", "steps.jsonl", "summary.json", "profile_rank0.txt", "notes.md", "run.toml"}) {
    write_text(run + "/" + name, "earlier");
  }
  fs::create_directories(run + "/checkpoints/step_00000002");  // incomplete: no manifest
  fs::create_symlink(outside + "/keep.txt", run + "/profile_rank1.json");
  {
    // Claiming alone removes nothing (a later check may still refuse the command).
    const RunDirClaim second(run, false);
    EXPECT_EQ(names_in(run).size(), 9u);
    second.clear_earlier_outputs();
  }
  EXPECT_EQ(names_in(run), (std::vector<std::string>{".hetpar-run", "notes.md", "run.toml"}));
  EXPECT_EQ(text_of(outside + "/keep.txt"), "keep");  // the link went, not what it points to
  // A marker that is a link is replaced by hetpar's own, never written through.
  const std::string linked = dir / "linked";
  fs::create_directories(linked);
  fs::create_symlink(outside + "/keep.txt", linked + "/.hetpar-run");
  { RunDirClaim claim(linked, false); }
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(linked + "/.hetpar-run")));
  EXPECT_EQ(text_of(outside + "/keep.txt"), "keep");
}

TEST(RunDir, AFreshRunNeverReplacesACompleteCheckpoint) {
  Scratch dir;
  const std::string run = dir / "run", step = run + "/checkpoints/step_00000004";
  // A run directory from before runs were marked: its checkpoint is the proof it is hetpar's.
  fs::create_directories(step);
  write_text(step + "/manifest.json", "{}");
  write_text(run + "/steps.jsonl", "earlier\n");
  write_text(run + "/summary.json", "{}");
  try {
    RunDirClaim fresh(run, false);
    FAIL() << "a fresh run took over a directory with a checkpoint";
  } catch (const RunDirError& e) {
    EXPECT_NE(std::string(e.what()).find("/checkpoints, which hetpar train would replace"), std::string::npos)
        << e.what();
  }
  // A killed run's temporaries, beside its outputs and in a checkpoint it was writing.
  const std::string half_rank = step + "/rank_00000.safetensors.tmp." + ended_pid();
  write_text(half_rank, "half");
  write_text(run + "/steps.jsonl.tmp." + ended_pid(), "half");
  {
    const RunDirClaim resumed(run, true);  // marked now; cleared, the stale summary goes, the rest stays
    EXPECT_TRUE(fs::exists(run + "/summary.json"));
    resumed.clear_earlier_outputs();
  }
  EXPECT_FALSE(fs::exists(half_rank));
  EXPECT_EQ(names_in(run), (std::vector<std::string>{".hetpar-run", "checkpoints", "steps.jsonl"}));
  try {
    RunDirClaim fresh(run, false);
    FAIL() << "a fresh run replaced a complete checkpoint";
  } catch (const RunDirError& e) {
    EXPECT_NE(std::string(e.what()).find("continue it with --resume " + run), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(step + "/manifest.json"));
  EXPECT_EQ(text_of(run + "/steps.jsonl"), "earlier\n");
}

TEST(RunDir, OneRunPerDirectoryNamingTheHolder) {
  Scratch dir;
  const std::string run = dir / "run";
  RunDirClaim first(run, false);
  write_text(run + "/steps.jsonl", "being written");
  for (bool resuming : {false, true}) {
    try {
      RunDirClaim second(run, resuming);
      FAIL() << "two runs in one directory";
    } catch (const RunDirError& e) {
      EXPECT_NE(std::string(e.what()).find("(pid " + std::to_string(getpid()) + ") is writing into"),
                std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(text_of(run + "/steps.jsonl"), "being written");
  EXPECT_TRUE(same_directory(run, run + "/"));
  EXPECT_TRUE(same_directory(run, dir / "x/../run"));
  EXPECT_FALSE(same_directory(run, dir / "other"));
}

// ---- sweep directories ----------------------------------------------------------

TEST(SweepDir, FreshNeverEmptiesADirectoryHetparDidNotMake) {
  Scratch dir;
  const std::string users = dir / "users";
  fs::create_directories(users);
  write_text(users + "/thesis.tex", "precious");
  for (bool fresh : {true, false}) {
    try {
      SweepDir sweep(users, fresh);
      FAIL() << "took over a directory with the user's files";
    } catch (const SweepDirError& e) {
      EXPECT_NE(std::string(e.what()).find("was not made by hetpar sweep"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(text_of(users + "/thesis.tex"), "precious");
  EXPECT_FALSE(fs::exists(users + "/" + kSweepMarker));
  write_text(dir / "a_file", "x");
  EXPECT_THROW(SweepDir(dir / "a_file", true), SweepDirError);
}

TEST(SweepDir, FreshEmptiesItsOwnDirectoryButNotWhatLinksPointTo) {
  Scratch dir;
  const std::string out = dir / "sweep", outside = dir / "outside";
  fs::create_directories(outside);
  write_text(outside + "/keep.txt", "keep");
  {
    SweepDir sweep(out, false);  // absent: created and marked
    fs::create_directories(out + "/runs/p001");
    write_text(out + "/results.jsonl", "{}\n");
    fs::create_directory_symlink(outside, out + "/link");
  }
  {
    SweepDir sweep(out, true);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{kSweepMarker});
  }
  EXPECT_EQ(text_of(outside + "/keep.txt"), "keep");
  fs::create_directories(dir / "empty");
  EXPECT_NO_THROW(SweepDir(dir / "empty", true));  // an empty directory is adopted
}

TEST(SweepDir, OneSweepPerDirectoryNamingTheHolder) {
  Scratch dir;
  const std::string out = dir / "sweep";
  SweepDir first(out, false);
  try {
    SweepDir second(out, true);
    FAIL() << "two sweeps in one directory";
  } catch (const SweepDirError& e) {
    EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(getpid())), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(out + "/" + kSweepMarker));  // the refused --fresh removed nothing
}

// ---- resume ---------------------------------------------------------------------

std::vector<SweepRun> three_runs() {
  std::vector<SweepRun> runs(3);
  const char* ids[] = {"b001", "p001", "p002"};
  for (int i = 0; i < 3; ++i) {
    runs[i].id = ids[i];
    runs[i].config_hash = std::string("hash-") + ids[i];
    runs[i].config = RunConfig{};
  }
  runs[2].config.reset();  // p002 is invalid
  runs[2].config_hash.clear();
  return runs;
}

std::string record(const std::string& id, const std::string& status) {
  return json{{"run_id", id}, {"status", status}, {"config_hash", status == "invalid" ? "" : "hash-" + id}}.dump();
}

TEST(SweepResume, TornLastLineDuplicatesAndInvalidRecordsAreCleanedIdempotently) {
  Scratch dir;
  const std::string path = dir / "results.jsonl";
  // b001 ran twice (the last record wins), p002 was recorded invalid, and a
  // crash cut the last write short: no newline, not JSON.
  write_text(path, record("b001", "failed") + "\n" + record("p002", "invalid") + "\n" + record("b001", "ok") + "\n" +
                       R"({"run_id": "p001", "sta)");
  const ResumeState first = resume_results(path, three_runs(), false);
  EXPECT_EQ(first.dropped_torn, 1u);
  ASSERT_EQ(first.done.size(), 1u);
  EXPECT_EQ(first.done.at("b001")["status"], "ok");
  EXPECT_EQ(text_of(path), record("b001", "ok") + "\n");  // ends on a newline: the next append starts clean
  const ResumeState again = resume_results(path, three_runs(), false);
  EXPECT_EQ(again.done.size(), 1u);
  EXPECT_EQ(text_of(path), record("b001", "ok") + "\n");
}

TEST(SweepResume, RetryFailedDropsWhatDidNotSucceed) {
  Scratch dir;
  const std::string path = dir / "results.jsonl";
  write_text(path, record("b001", "ok") + "\n" + record("p001", "diverged") + "\n");
  const ResumeState kept = resume_results(path, three_runs(), false);
  EXPECT_EQ(kept.done.size(), 2u);  // a diverged run is an outcome: not rerun by default
  const ResumeState retried = resume_results(path, three_runs(), true);
  EXPECT_EQ(retried.dropped_retry, 1u);
  EXPECT_EQ(retried.done.count("p001"), 0u);
  EXPECT_EQ(text_of(path), record("b001", "ok") + "\n");
}

TEST(SweepResume, ResultsOfAnotherSweepAreRefused) {
  Scratch dir;
  const std::string path = dir / "results.jsonl";
  write_text(path, json{{"run_id", "p001"}, {"status", "ok"}, {"config_hash", "other"}}.dump() + "\n");
  EXPECT_THROW(resume_results(path, three_runs(), false), std::runtime_error);
  EXPECT_EQ(resume_results(dir / "absent.jsonl", three_runs(), false).done.size(), 0u);
}

// A run valid by its definition that this machine cannot host (its config
// dropped, its hash kept) keeps the record measured elsewhere, --retry-failed
// or not; a run invalid by its definition now means the sweep file changed.
TEST(SweepResume, MeasuredResultsAreNeverReplacedByInvalid) {
  Scratch dir;
  const std::string path = dir / "results.jsonl";
  const std::string text = record("b001", "ok") + "\n" + record("p001", "failed") + "\n";
  write_text(path, text);
  std::vector<SweepRun> runs = three_runs();
  runs[1].config.reset();  // p001: too big for this machine
  EXPECT_EQ(resume_results(path, runs, true).done.size(), 2u);
  EXPECT_EQ(text_of(path), text);
  write_text(path, text + record("p002", "ok") + "\n");  // p002 was measured, and is invalid now
  try {
    resume_results(path, runs, false);
    FAIL() << "a changed sweep definition was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("(run p002: it is invalid now"), std::string::npos) << e.what();
  }
  EXPECT_EQ(text_of(path), text + record("p002", "ok") + "\n");
}

// A record the sweep did not write: the file and line, and what is wrong.
TEST(SweepResume, MalformedRecordsNameTheirLine) {
  Scratch dir;
  const std::string path = dir / "results.jsonl";
  const std::pair<json, std::string> bad[] = {
      {json{{"run_id", 5}, {"status", "ok"}, {"config_hash", "hash-b001"}}, ":3: run_id must be a string"},
      {json{{"run_id", "p001"}, {"status", 1}, {"config_hash", "hash-p001"}}, ":3: status must be a string"},
      {json{{"run_id", "p001"}, {"status", "ok"}, {"config_hash", 7}}, ":3: config_hash must be a string"},
      {json{{"run_id", "p001"}, {"status", "weird"}, {"config_hash", "hash-p001"}}, ":3: unknown status \"weird\""}};
  for (const auto& [line, message] : bad) {
    write_text(path, record("b001", "ok") + "\n\n" + line.dump() + "\n");  // a blank line still counts as a line
    try {
      resume_results(path, three_runs(), false);
      FAIL() << "accepted " << line.dump();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path + message), std::string::npos) << e.what();
    }
  }
}

TEST(ReadResults, ATornLineInTheMiddleIsStillAnError) {
  Scratch dir;
  const std::string path = dir / "results.jsonl";
  write_text(path, R"({"run_id": "p0)" "\n" + record("b001", "ok") + "\n");
  bool torn = false;
  EXPECT_THROW(read_results(path, &torn), std::runtime_error);
  write_text(path, record("b001", "ok") + "\n{\"run");
  EXPECT_THROW(read_results(path), std::runtime_error);  // unless the caller accepts a torn tail
  EXPECT_EQ(read_results(path, &torn).size(), 1u);
  EXPECT_TRUE(torn);
}

// ---- what one machine can host --------------------------------------------------

RunConfig tiny_config(const std::vector<std::string>& overrides) {
  return load_run_config(source_tree_path("/workloads/runs/quickstart.toml"), overrides);
}

TEST(LocalLimits, AMistypedLayoutIsRefusedBeforeAnythingStarts) {
  const RunConfig c = tiny_config({"layout.placement=uniform", "layout.encoder.dp=1", "layout.llm.tp=1",
                                   "layout.llm.dp=100000", "data.global_batch_size=200000"});
  const std::string why = local_rank_count_problem(c, c.placement.world_size, false, "do this");
  EXPECT_NE(why.find("100000 ranks"), std::string::npos) << why;
  EXPECT_NE(why.find("llm tp1.cp1.pp1.dp100000"), std::string::npos) << why;
  EXPECT_NE(why.find("check the layout, or do this"), std::string::npos) << why;  // the command's own way out
  EXPECT_EQ(local_rank_count_problem(c, c.placement.world_size, true, "do this"), "");
  EXPECT_EQ(local_rank_count_problem(c, max_local_ranks(), false, "do this"), "");
  EXPECT_NE(local_rank_count_problem(c, max_local_ranks() + 1, false, "do this"), "");
}

TEST(LocalLimits, MemoryLowerBoundScalesWithTheShardsAndNamesTheModule) {
  const RunConfig small = tiny_config({});
  EXPECT_EQ(local_memory_problem(small, small.placement.world_size), "");
  const RankMemoryEstimate e = estimate_rank_memory(small);
  // Colocated tiny model: both modules' weights, grads and AdamW state (16 bytes a parameter) on every rank.
  EXPECT_GT(e.bytes, 16.0 * 1e5);
  EXPECT_LT(e.bytes, 64.0 * (1 << 20));
  const RunConfig huge = tiny_config({"llm.hidden=32768", "llm.layers=64", "llm.heads=64", "llm.kv_heads=64",
                                      "llm.ffn_hidden=65536"});
  EXPECT_EQ(estimate_rank_memory(huge).module, "llm");
  const std::string why = local_memory_problem(huge, huge.placement.world_size);
  EXPECT_NE(why.find("cannot fit"), std::string::npos) << why;
  EXPECT_NE(why.find("llm.hidden = 32768"), std::string::npos) << why;
  // Twice the tensor-parallel ways, about half the bytes on a rank.
  const RunConfig tp1 = tiny_config({"layout.placement=uniform", "layout.encoder.dp=1", "layout.llm.tp=1",
                                     "layout.llm.dp=2"});
  const RunConfig tp2 = tiny_config({"layout.placement=uniform", "layout.encoder.dp=1", "layout.llm.tp=2"});
  EXPECT_NEAR(estimate_rank_memory(tp2).bytes / estimate_rank_memory(tp1).bytes, 0.5, 0.02);
}

}  // namespace
}  // namespace hetpar
