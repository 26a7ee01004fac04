#include "launch/local_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <fstream>
#include <stdexcept>

#include "dist/launch_env.hpp"
#include "dist/listen_socket.hpp"
#include "util/exit_codes.hpp"
#include "util/log.hpp"

extern char** environ;

namespace hetpar {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKeptStderrLines = 8;
constexpr auto kKillAfterTerm = std::chrono::seconds(3);
// After a rank's collective failed (a lost peer or a timeout), how long the
// rest get to end by themselves: those that lost a peer end at once, so a
// rank still running after this is the one that stopped answering.
constexpr auto kUnresponsiveMargin = std::chrono::seconds(3);

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

struct Child {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_partial, err_partial;
  std::deque<std::string> err_lines;
  bool exited = false;
  RankOutcome outcome;
};

// The environment of rank `rank`: ours, minus any launch variables we were
// started with, plus the rank's own. Built before fork: only async-signal-safe
// calls may run between fork and exec.
std::vector<std::string> rank_environment(const LocalLaunchSpec& spec, int rank, int port) {
  static const char* kReplaced[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                                    "OMP_NUM_THREADS", "SLURM_PROCID", "SLURM_NTASKS",
                                    kLocalLauncherVar};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const char* r : kReplaced) replaced = replaced || name == r;
    if (!replaced) env.push_back(entry);
  }
  const std::pair<std::string, std::string> own[] = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(spec.nproc)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(spec.nproc)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},  // the launcher hosts the store
      {"OMP_NUM_THREADS", std::to_string(spec.intra_op_threads)},
      {kLocalLauncherVar, "1"}};
  for (const auto& [k, v] : own) env.push_back(k + "=" + v);
  for (const auto& [k, v] : spec.env) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

Child spawn(const LocalLaunchSpec& spec, int rank, int port) {
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> env = rank_environment(spec, rank, port);
  std::vector<char*> argv = c_strings(args), envp = c_strings(env);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher dies: so do its ranks
    if (getppid() != parent) _exit(127);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    const char msg[] = "hetpar launcher: exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  Child c;
  c.pid = pid;
  c.out_fd = out[0];
  c.err_fd = err[0];
  c.outcome.rank = rank;
  return c;
}

// Ranks tag their own lines; untagged lines (from libraries) get the tag here.
void forward_line(const LocalLaunchSpec& spec, Child& c, const std::string& line, bool is_err) {
  if (is_err) {
    c.err_lines.push_back(line);
    if (c.err_lines.size() > kKeptStderrLines) c.err_lines.pop_front();
  }
  if (!spec.echo_output) {
    c.outcome.output += line + "\n";
    return;
  }
  const std::string tag = fmt::format("[rank {}] ", c.outcome.rank);
  const std::string text = line.rfind(tag, 0) == 0 ? line : tag + line;
  // Line by line even into a pipe or file: `| tee` shows progress as it
  // happens, and a killed launcher loses nothing it had read.
  FILE* stream = is_err ? stderr : stdout;
  std::fputs((text + "\n").c_str(), stream);
  std::fflush(stream);
}

// Reads what is available on fd; returns false at end of stream.
bool drain(const LocalLaunchSpec& spec, Child& c, int& fd, std::string& partial, bool is_err) {
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!partial.empty()) forward_line(spec, c, partial, is_err);
    partial.clear();
    close(fd);
    fd = -1;
    return false;
  }
  partial.append(buf, static_cast<size_t>(n));
  for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
    forward_line(spec, c, partial.substr(0, nl), is_err);
    partial.erase(0, nl + 1);
  }
  return true;
}

void record_exit(Child& c, int status) {
  c.exited = true;
  if (WIFSIGNALED(status)) c.outcome.signal = WTERMSIG(status);
  else c.outcome.exit_code = WEXITSTATUS(status);
}

bool failed(const RankOutcome& o) { return o.signal != 0 || o.exit_code != 0; }

// A rank that only lost a peer (its collective failed) or that the launcher
// stopped is a consequence. Exits race (a peer sees the socket close before
// the culprit is reaped), so the first failure seen is not always the cause.
bool secondary(const RankOutcome& o) {
  return o.killed_by_launcher || (o.signal == 0 && o.exit_code == kExitCollectiveError);
}

// The culprit: the first rank that failed for a reason of its own; else the
// first that stopped answering while its peers' collectives failed; else the
// first failure seen.
int pick_culprit(const std::vector<RankOutcome>& ranks, const std::vector<int>& failure_order) {
  for (int rank : failure_order) {
    if (!secondary(ranks[rank])) return rank;
  }
  for (const RankOutcome& r : ranks) {
    if (r.unresponsive) return r.rank;
  }
  return failure_order.empty() ? -1 : failure_order.front();
}

// 'T' when the process is stopped (SIGSTOP, a debugger), else its state letter.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return '?';
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

}  // namespace

LaunchResult launch_local(const LocalLaunchSpec& spec) {
  if (spec.nproc < 1) throw std::invalid_argument("--nproc must be >= 1");
  std::signal(SIGPIPE, SIG_IGN);  // the store we host writes to ranks that may be gone
  const auto start = Clock::now();
  // The store lives here, like torchrun's agent store: no rank races for a
  // port. It listens on loopback only: nothing off this machine can reach it.
  const ListenSocket listener = listen_on("127.0.0.1", 0);
  c10d::TCPStoreOptions store_options;
  store_options.port = listener.port;
  store_options.isServer = true;
  store_options.waitWorkers = false;
  store_options.masterListenFd = listener.fd;
  c10d::TCPStore store("127.0.0.1", store_options);
  if (spec.echo_output) log_info("hetpar: rendezvous store on {}:{} (loopback only)", listener.address, listener.port);

  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::vector<Child> children;
  for (int r = 0; r < spec.nproc; ++r) children.push_back(spawn(spec, r, store.getPort()));

  LaunchResult result;
  std::vector<int> failure_order;  // ranks in the order their failure was seen
  std::optional<Clock::time_point> kill_at, hard_kill_at, first_own_failure_at;
  auto signal_all = [&](int sig) {
    for (auto& c : children) {
      if (!c.exited) {
        kill(c.pid, sig);
        c.outcome.killed_by_launcher = true;
      }
    }
  };
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;
    for (auto& c : children) {
      if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0}), owners.push_back({&c, false});
      if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0}), owners.push_back({&c, true});
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child& c = *owners[i].first;
      if (owners[i].second) drain(spec, c, c.err_fd, c.err_partial, true);
      else drain(spec, c, c.out_fd, c.out_partial, false);
    }
    for (auto& c : children) {
      int status = 0;
      if (!c.exited && waitpid(c.pid, &status, WNOHANG) == c.pid) {
        record_exit(c, status);
        if (failed(c.outcome)) {
          failure_order.push_back(c.outcome.rank);
          // A rank failing by itself: the others get the grace to notice.
          // Only collectives failed: the peer they waited for may be hung,
          // and the job must not wait a second timeout for it.
          if (!secondary(c.outcome) && !first_own_failure_at) {
            first_own_failure_at = Clock::now();
            kill_at = *first_own_failure_at + spec.grace;
          } else if (!kill_at) {
            kill_at = Clock::now() + std::min<Clock::duration>(spec.grace, kUnresponsiveMargin);
          }
        }
      }
    }
    const auto now = Clock::now();
    if (g_interrupted && !kill_at) kill_at = now;
    if (kill_at && now >= *kill_at && !hard_kill_at) {
      // Only collectives failed so far: whoever is still running stopped
      // answering. It gets SIGKILL at once; a stopped or hung rank cannot act on SIGTERM.
      const bool only_collectives_failed = !g_interrupted && !failure_order.empty() && !first_own_failure_at;
      for (auto& c : children) {
        if (c.exited || !only_collectives_failed) continue;
        c.outcome.unresponsive = true;
        c.outcome.state_when_killed = process_state(c.pid);
        kill(c.pid, SIGKILL);
        c.outcome.killed_by_launcher = true;
      }
      signal_all(SIGTERM);
      hard_kill_at = now + kKillAfterTerm;
    }
    if (hard_kill_at && now >= *hard_kill_at) signal_all(SIGKILL);
    bool done = true;
    for (auto& c : children) done = done && c.exited && c.out_fd < 0 && c.err_fd < 0;
    if (done) break;
    if (fds.empty()) usleep(20'000);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  for (auto& c : children) {
    c.outcome.last_stderr.assign(c.err_lines.begin(), c.err_lines.end());
    result.ranks.push_back(c.outcome);
  }
  result.first_failed = pick_culprit(result.ranks, failure_order);
  if (result.first_failed >= 0) {
    const RankOutcome& first = result.ranks[result.first_failed];
    result.exit_code = first.signal == 0 ? first.exit_code : 128 + first.signal;
  } else if (g_interrupted) {
    result.exit_code = 130;
  }
  g_interrupted = 0;
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

std::string describe_failure(const LaunchResult& r) {
  if (r.exit_code == 0) return "";
  if (r.first_failed < 0) return "the job was interrupted; every rank was stopped";
  const RankOutcome& first = r.ranks[r.first_failed];
  if (first.unresponsive) {
    std::string text = fmt::format(
        "rank {} stopped answering: its peers' collectives timed out waiting for it, and it was still {} when "
        "they had failed; the launcher killed it", first.rank,
        first.state_when_killed == 'T' ? "stopped by a signal (process state T)" : "running (hung or too slow)");
    for (const auto& o : r.ranks) {
      if (o.rank != first.rank && failed(o) && !o.unresponsive) {
        text += fmt::format("; rank {} exited with {}", o.rank, o.exit_code ? o.exit_code : 128 + o.signal);
      }
    }
    return text;
  }
  std::string text = first.signal
                         ? fmt::format("rank {} failed first: killed by signal {} ({})",
                                       first.rank, first.signal, strsignal(first.signal))
                         : fmt::format("rank {} failed first with exit code {}", first.rank,
                                       first.exit_code);
  // The most telling line is its last "error:" line, else its last line.
  std::string why;
  for (const auto& line : first.last_stderr) {
    if (line.find("error") != std::string::npos) why = line;
  }
  if (why.empty() && !first.last_stderr.empty()) why = first.last_stderr.back();
  if (!why.empty()) text += ": " + why;
  for (const auto& o : r.ranks) {
    if (o.rank == first.rank) continue;
    if (o.killed_by_launcher && o.signal) text += fmt::format("; rank {} was stopped by the launcher", o.rank);
    else if (failed(o)) text += fmt::format("; rank {} exited with {}", o.rank, o.exit_code ? o.exit_code : 128 + o.signal);
    else text += fmt::format("; rank {} finished", o.rank);
  }
  return text;
}

}  // namespace hetpar
