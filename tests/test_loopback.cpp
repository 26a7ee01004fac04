// A local job listens on loopback only: its rendezvous store (hosted by the
// launcher) and the ranks' own sockets are out of reach of other machines.
// Under torchrun/srun rank 0 hosts the store where MASTER_ADDR says. Read
// from the kernel's table of sockets (/proc/net/tcp and tcp6), matched to
// the job's processes by their socket inodes.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

namespace fs = std::filesystem;

struct Listener {
  pid_t pid;
  std::string address;
  int port;
};

std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// "0100007F" (IPv4) or 32 hex digits (IPv6), as the kernel prints them: each
// 32-bit word in host order.
std::string address_text(const std::string& hex) {
  unsigned char bytes[16];
  const size_t words = hex.size() / 8;
  for (size_t w = 0; w < words; ++w) {
    const uint32_t v = static_cast<uint32_t>(std::stoul(hex.substr(8 * w, 8), nullptr, 16));
    std::memcpy(bytes + 4 * w, &v, 4);
  }
  char text[INET6_ADDRSTRLEN];
  inet_ntop(words == 1 ? AF_INET : AF_INET6, bytes, text, sizeof text);
  return text;
}

// Every listening TCP socket of the processes `pids`.
std::vector<Listener> listeners_of(const std::vector<pid_t>& pids) {
  std::vector<Listener> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A") continue;  // TCP_LISTEN
      for (pid_t pid : pids) {
        if (!socket_inodes(pid).count(inode)) continue;
        const size_t colon = local.find(':');
        out.push_back({pid, address_text(local.substr(0, colon)), std::stoi(local.substr(colon + 1), nullptr, 16)});
      }
    }
  }
  return out;
}

bool loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address.rfind("::ffff:127.", 0) == 0;
}

std::vector<pid_t> with_children(pid_t pid) {
  std::vector<pid_t> pids{pid};
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t child; in >> child;) pids.push_back(child);
  return pids;
}

pid_t start_train(const std::vector<std::string>& extra_env, const std::string& out) {
  const std::string hetpar = hetpar_binary(), run = source_tree_path("/workloads/runs/quickstart.toml");
  const pid_t pid = fork();
  if (pid == 0) {
    for (const std::string& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
    freopen("/dev/null", "w", stdout);
    execl(hetpar.c_str(), hetpar.c_str(), "train", run.c_str(), "--set", "run.steps=1000000", "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Polls until the job's processes listen on at least `want` sockets.
std::vector<Listener> wait_for_listeners(const std::function<std::vector<pid_t>()>& pids, size_t want) {
  std::vector<Listener> found;
  for (int i = 0; i < 600 && found.size() < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    found = listeners_of(pids());
  }
  return found;
}

std::string describe(const std::vector<Listener>& ls) {
  std::string text;
  for (const Listener& l : ls) text += "pid " + std::to_string(l.pid) + " " + l.address + ":" + std::to_string(l.port) + "\n";
  return text;
}

TEST(Loopback, ALocalJobListensOnLoopbackOnly) {
  const std::string out = ::testing::TempDir() + "/loopback_" + std::to_string(getpid());
  std::filesystem::remove_all(out);
  const pid_t launcher = start_train({}, out);
  // The launcher's store and each rank's Gloo listener: at least three.
  const std::vector<Listener> found = wait_for_listeners([&] { return with_children(launcher); }, 3);
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  ASSERT_GE(found.size(), 3u) << describe(found);
  bool launcher_listens = false;
  for (const Listener& l : found) {
    EXPECT_TRUE(loopback(l.address)) << "listens beyond loopback:\n" << describe(found);
    launcher_listens = launcher_listens || l.pid == launcher;
  }
  EXPECT_TRUE(launcher_listens) << "the store is hosted by the launcher:\n" << describe(found);
}

// Slurm-style start, rank 0 hosting the store: it listens where MASTER_ADDR says.
TEST(Loopback, RankZeroHostsTheStoreAtMasterAddr) {
  const std::string out = ::testing::TempDir() + "/loopback_slurm_" + std::to_string(getpid());
  std::filesystem::remove_all(out);
  const std::string port = std::to_string(20000 + getpid() % 20000);
  const std::vector<std::string> common = {"SLURM_NTASKS=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
  std::vector<std::string> env0 = common, env1 = common;
  env0.push_back("SLURM_PROCID=0");
  env1.push_back("SLURM_PROCID=1");
  env1.push_back("SLURM_LOCALID=1");
  const pid_t rank0 = start_train(env0, out), rank1 = start_train(env1, out);
  const std::vector<Listener> found = wait_for_listeners([&] { return std::vector<pid_t>{rank0}; }, 2);
  kill(rank0, SIGKILL);
  kill(rank1, SIGKILL);
  waitpid(rank0, nullptr, 0);
  waitpid(rank1, nullptr, 0);
  ASSERT_GE(found.size(), 2u) << describe(found);  // the store and Gloo
  bool store = false;
  for (const Listener& l : found) {
    EXPECT_TRUE(loopback(l.address)) << describe(found);
    store = store || std::to_string(l.port) == port;
  }
  EXPECT_TRUE(store) << "no listener on MASTER_PORT " << port << ":\n" << describe(found);
}

}  // namespace
}  // namespace hetpar::test
