// Spawns N ranks of a command on this machine, hosts their rendezvous store,
// forwards their output, and makes sure a failed rank ends the whole job:
// no hang and no orphans. The same role as torchrun's agent, for one machine.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace hetpar {

struct LocalLaunchSpec {
  std::vector<std::string> argv;  // argv[0]: the executable (a path)
  int nproc = 1;
  int intra_op_threads = 1;       // OMP_NUM_THREADS of each rank
  // After the first rank fails by itself, the others get this long to fail
  // by themselves (their collectives error out or time out), then are
  // killed. After a collective failure they get at most 3 s: a rank still
  // running then is the one the collective waited for.
  std::chrono::milliseconds grace{30'000};
  std::vector<std::pair<std::string, std::string>> env;  // extra variables
  bool echo_output = true;        // forward ranks' output to ours
};

struct RankOutcome {
  int rank = 0;
  int exit_code = 0;               // meaningful when signal == 0
  int signal = 0;                  // the signal that ended it, or 0
  bool killed_by_launcher = false;
  // Still running when every failure so far was a collective's (its peers
  // timed out waiting for it): the rank that stopped answering.
  bool unresponsive = false;
  char state_when_killed = '?';    // its /proc state letter then ('T' = stopped)
  std::vector<std::string> last_stderr;  // its last few stderr lines
  std::string output;              // everything it printed (when echo_output is false)
};

struct LaunchResult {
  int exit_code = 0;               // 0 when every rank succeeded
  // The rank that caused the failure: the first to fail for a reason of its
  // own rather than a lost peer (else the first to fail); -1 on success.
  int first_failed = -1;
  std::vector<RankOutcome> ranks;
  double wall_seconds = 0;
};

LaunchResult launch_local(const LocalLaunchSpec& spec);

// One paragraph for the user: which rank failed first and why, what became of
// the others. Empty when the job succeeded.
std::string describe_failure(const LaunchResult& result);

}  // namespace hetpar
