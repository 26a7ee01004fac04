#include "sweep/sweep_runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "checkpoint/checkpoint_manifest.hpp"
#include "metrics/results_csv.hpp"
#include "sweep/sweep_prediction.hpp"
#include "metrics/run_summary.hpp"
#include "sweep/sweep_dir.hpp"
#include "sweep/sweep_report.hpp"
#include "sweep/sweep_resume.hpp"
#include "util/durable_file.hpp"
#include "util/output_dir.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct ChildOutcome {
  int exit_code = 0;
  int signal = 0;
  bool timed_out = false;
};

// Runs argv with its output in `log`; it dies with us (a killed sweep leaves
// no run behind) and is killed past `timeout_s`.
ChildOutcome run_child(const std::vector<std::string>& argv, const std::string& log, double timeout_s) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      const char msg[] = "hetpar sweep: cannot create the run's log file\n";
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      _exit(126);
    }
    dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  ChildOutcome out;
  const auto start = Clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
      out.timed_out = true;
      kill(pid, SIGTERM);  // the launcher ends its ranks on SIGTERM
      std::this_thread::sleep_for(std::chrono::seconds(5));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
  return out;
}

// The last lines of a log: what a failed run said last.
std::string log_tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

std::string failure_reason(const ChildOutcome& o, const std::string& log) {
  const std::string tail = log_tail(log, 12);
  if (o.timed_out) return "timed out; last output:\n" + tail;
  if (tail.find("out of memory") != std::string::npos || tail.find("std::bad_alloc") != std::string::npos ||
      o.signal == SIGKILL) {
    return "out of memory (or killed); last output:\n" + tail;
  }
  return fmt::format("exit code {}{}; last output:\n{}", o.exit_code,
                     o.signal ? fmt::format(" (signal {})", o.signal) : "", tail);
}

// One word for sh, whatever `text` holds (a quote in a path must not end the word).
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `hetpar train` of one run, on the local launcher or the given launch prefix.
// A run killed mid-way (the sweep was) continues from its latest complete checkpoint.
std::vector<std::string> train_command(const SweepOptions& options, const SweepRun& run, const std::string& dir) {
  const bool resume = latest_complete_checkpoint(dir).has_value();
  if (options.launch.empty()) {
    std::vector<std::string> argv = {options.hetpar_binary, "train", dir + "/run.toml", "--nproc",
                                     std::to_string(run.world_size), "--out", dir};
    if (resume) argv.insert(argv.end(), {"--resume", dir});
    return argv;
  }
  std::string prefix = options.launch;
  for (size_t at; (at = prefix.find("{ranks}")) != std::string::npos;) {
    prefix.replace(at, 7, std::to_string(run.world_size));
  }
  return {"/bin/sh", "-c",
          fmt::format("exec {} {} train {} --out {}{}", prefix, shell_quoted(options.hetpar_binary),
                      shell_quoted(dir + "/run.toml"), shell_quoted(dir), resume ? " --resume " + shell_quoted(dir) : "")};
}

nlohmann::json base_record(const SweepRun& run) {
  nlohmann::json r = {{"run_id", run.id}, {"role", run.is_baseline ? "baseline" : "point"}, {"label", run.label},
                      {"config_hash", run.config_hash}, {"world_size", run.world_size}, {"repeat", run.repeat}};
  r["baseline_id"] = run.is_baseline ? nlohmann::json() : nlohmann::json(run.baseline_id);
  for (const auto& [axis, value] : run.axes) r["axes"][axis] = value;
  for (const auto& [axis, value] : run.axes) {
    if (axis == "encoder") r["encoder_name"] = value;
  }
  return r;
}

// A point against its baseline: speed-ups and the loss-curve difference.
void compare_with_baseline(nlohmann::json& point, const nlohmann::json& baseline, const std::string& out_dir,
                           double rtol) {
  auto ratio = [&](const char* field) -> nlohmann::json {
    if (!point.contains(field) || !baseline.contains(field)) return nullptr;
    return point[field].get<double>() / baseline[field].get<double>();
  };
  point["speedup_tflops"] = ratio("tflops_per_gpu");
  point["speedup_tokens"] = ratio("tokens_per_second");
  const std::vector<nlohmann::json> ours = read_steps(out_dir + "/" + point["run_dir"].get<std::string>());
  const std::vector<nlohmann::json> theirs = read_steps(out_dir + "/" + baseline["run_dir"].get<std::string>());
  const LossCurveDifference d = loss_curve_difference(ours, theirs);
  point["loss_max_rel_diff"] = d.max_rel;
  point["loss_compared_steps"] = d.compared;
  point["loss_rtol"] = rtol;
  bool parity = d.compared > 0 && d.max_rel <= rtol;
  // Held-out losses (run.eval_every), where both evaluated: held to the same tolerance.
  const LossCurveDifference held_out = loss_curve_difference(ours, theirs, "eval_loss");
  if (held_out.compared > 0) {
    point["eval_loss_max_rel_diff"] = held_out.max_rel;
    point["eval_loss_compared_steps"] = held_out.compared;
    parity = parity && held_out.max_rel <= rtol;
  }
  point["loss_parity_ok"] = parity;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The run's outcome into its record: "ok" with its summary's figures,
// "diverged" at the step its summary names, "oom" when a rank ran out of
// memory, else "failed" with the reason.
void record_outcome(nlohmann::json& record, const ChildOutcome& outcome, const std::string& dir) {
  const bool finished = !outcome.timed_out && outcome.signal == 0 &&
                        (outcome.exit_code == 0 || outcome.exit_code == kExitDiverged);
  nlohmann::json summary;
  if (finished) {
    try {
      summary = nlohmann::json::parse(file_text(dir + "/summary.json"));
    } catch (const std::exception& e) {
      record["status"] = "failed";
      record["error"] = std::string("the run ended but its summary.json is unreadable: ") + e.what();
      return;
    }
    for (auto& [key, value] : summary.items()) {
      if (!record.contains(key)) record[key] = value;
    }
  }
  if (finished && outcome.exit_code == 0 && summary.value("status", "ok") == "ok") {
    record["status"] = "ok";
  } else if (finished && summary.value("status", "") == "diverged") {
    record["status"] = "diverged";
    record["error"] = fmt::format("the loss diverged at step {}", summary.value("diverged_step", int64_t{0}));
  } else if (!outcome.timed_out && outcome.signal == 0 && outcome.exit_code == kExitOutOfMemory) {
    record["status"] = "oom";
    record["error"] = failure_reason(outcome, dir + "/train.log");
  } else {
    record["status"] = "failed";
    record["error"] = failure_reason(outcome, dir + "/train.log");
  }
}

std::string duration_text(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60) : fmt::format("{}s", s);
}

std::string progress_bar(size_t done, size_t total) {
  constexpr size_t kWidth = 24;
  const size_t filled = total ? done * kWidth / total : kWidth;
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]";
}

}  // namespace

int run_sweep(const SweepSpec& spec, const std::vector<SweepRun>& runs, const SweepOptions& options) {
  const SweepDir sweep_dir(options.out_dir, options.fresh);  // ours alone until we return
  const std::string results_path = options.out_dir + "/results.jsonl";
  ensure_writable_dir(options.out_dir + "/runs");
  // The earlier results are checked against this sweep first: a refused one leaves its sweep.toml as it was.
  const ResumeState resumed = resume_results(results_path, runs, options.retry_failed);
  write_file_atomic(options.out_dir + "/sweep.toml", file_text(spec.file));
  std::map<std::string, nlohmann::json> done = resumed.done;
  AppendFile results(results_path, false);
  if (resumed.dropped_torn) log_error("warning: dropped the unfinished last record of {} (a crash mid-write)", results_path);
  if (resumed.dropped_retry) log_info("--retry-failed: running {} failed runs again", resumed.dropped_retry);

  size_t to_run = 0;
  for (const SweepRun& r : runs) to_run += r.config && !done.count(r.id);
  if (!done.empty()) log_info("resuming: {} runs already finished in {}", done.size(), results_path);
  const auto start = Clock::now();
  size_t ran = 0;
  for (const SweepRun& run : runs) {
    if (done.count(run.id)) continue;
    nlohmann::json record = base_record(run);
    if (!run.config) {
      if (run.repeat > 1) continue;  // an invalid run is recorded once, as its first round
      record["status"] = "invalid";
      record["error"] = run.invalid_reason;
      results.append_line(record.dump());
      continue;
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string eta = ran ? duration_text(elapsed / ran * (to_run - ran)) : "?";
    log_info("{} {}/{} runs | elapsed {} | eta {} | now {} ({}, {} ranks)", progress_bar(ran, to_run), ran, to_run,
             duration_text(elapsed), eta, run.id, run.label, run.world_size);
    const std::string dir = options.out_dir + "/runs/" + run.id;
    mark_output_dir(dir, run_outputs());  // the sweep made it: its runs may replace their own earlier outputs
    write_file_atomic(dir + "/run.toml", to_toml(*run.config));
    const ChildOutcome outcome = run_child(train_command(options, run, dir), dir + "/train.log", options.run_timeout_s);
    ++ran;
    record["run_dir"] = "runs/" + run.id;
    record_outcome(record, outcome, dir);
    if (record["status"] != "ok") {
      log_error("run {} ({}) {}: {}", run.id, run.label, record["status"].get<std::string>(),
                record["error"].get<std::string>());
    }
    if (!run.is_baseline && record["status"] == "ok" && done.count(run.baseline_id) &&
        done[run.baseline_id]["status"] == "ok") {
      compare_with_baseline(record, done[run.baseline_id], options.out_dir, spec.loss_rtol);
    }
    results.append_line(record.dump());
    done[run.id] = record;
  }
  log_info("{} {}/{} runs | elapsed {}", progress_bar(ran, to_run), ran, to_run,
           duration_text(std::chrono::duration<double>(Clock::now() - start).count()));

  std::vector<nlohmann::json> all = read_results(results_path);
  if (options.profile != nullptr) {  // this invocation's profile predicts every run, earlier ones' included
    add_predictions(all, runs, *options.profile);
    std::string lines;
    for (const nlohmann::json& r : all) lines += r.dump() + "\n";
    write_file_atomic(results_path, lines);
  }
  write_results_csv(all, options.out_dir + "/results.csv");
  const SweepVerdict verdict = write_sweep_report(all, spec, options.out_dir + "/report.md");
  log_info("\n{}", verdict.text);
  if (!options.python.empty()) {
    const ChildOutcome plots = run_child({options.python, options.plot_script, options.out_dir},
                                         options.out_dir + "/plots.log", 600);
    if (plots.exit_code != 0 || plots.signal != 0) {
      log_error("drawing the plots failed; see {}/plots.log", options.out_dir);
    } else {
      log_info("figures: {}/plots/*.png and *.svg", options.out_dir);
    }
  }
  log_info("results: {0}/results.jsonl, {0}/results.csv; report: {0}/report.md", options.out_dir);
  return verdict.all_ok ? 0 : kExitError;
}

}  // namespace hetpar
