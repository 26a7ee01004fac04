#include "tests/dist_harness.hpp"

#include <sys/wait.h>

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "dist/launch_env.hpp"
#include "util/log.hpp"

namespace hetpar::test {
namespace {

std::map<std::string, WorkerFn>& registry() {
  static std::map<std::string, WorkerFn> workers;
  return workers;
}

constexpr const char* kWorkerFlag = "--hetpar-worker=";
constexpr const char* kTimeoutVar = "HETPAR_TEST_TIMEOUT_MS";

[[noreturn]] void run_as_worker(const std::string& name) {
  const auto it = registry().find(name);
  if (it == registry().end()) die(1, "no worker named " + name);
  try {
    const std::optional<LaunchEnv> env = read_launch_env();
    if (!env) die(1, "worker started without a launch environment");
    set_log_rank(env->rank);
    RuntimeOptions options;
    options.backend = "gloo";
    options.timeout = std::chrono::milliseconds(std::atoi(std::getenv(kTimeoutVar)));
    Runtime runtime(*env, options);
    it->second(runtime);
  } catch (const std::exception& e) {
    die_of(e);
  }
  std::fflush(stdout);
  _exit(0);  // skip destructors of process groups, like the real binary on exit
}

}  // namespace

WorkerRegistrar::WorkerRegistrar(const std::string& name, WorkerFn fn) {
  registry()[name] = std::move(fn);
}

LaunchResult run_workers(const std::string& name, int nproc, const WorkerOptions& options) {
  LocalLaunchSpec spec;
  spec.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), kWorkerFlag + name};
  spec.nproc = nproc;
  spec.echo_output = false;
  spec.grace = std::chrono::milliseconds(options.timeout_ms + 5000);
  spec.env = options.env;
  spec.env.push_back({kTimeoutVar, std::to_string(options.timeout_ms)});
  return launch_local(spec);
}

::testing::AssertionResult all_ranks_succeeded(const LaunchResult& result) {
  if (result.exit_code == 0) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure() << describe_failure(result) << "\n";
  for (const auto& r : result.ranks) failure << "---- rank " << r.rank << " ----\n" << r.output;
  return failure;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what, double rtol, double atol) {
  require(got.sizes() == want.sizes(), "{}: shape [{}] vs [{}]", what, fmt::join(got.sizes(), ","),
          fmt::join(want.sizes(), ","));
  const double diff = (got - want).abs().max().item<double>();
  const double scale = want.abs().max().item<double>();
  require(diff <= atol + rtol * scale, "{}: max |diff| {:.3g} vs max |ref| {:.3g}", what, diff, scale);
}

void PrintTo(const PlacementCase& c, std::ostream* os) { *os << c.name; }

LaunchResult run_placement_workers(const std::string& worker, const PlacementCase& c) {
  WorkerOptions options;
  options.env = {{"TEST_PLACEMENT", c.placement}, {"TEST_ENCODER", c.encoder}, {"TEST_LLM", c.llm}};
  return run_workers(worker, c.world, options);
}

ModulePlacement placement_from_env() {
  auto layout = [](const char* var) {
    Layout l;
    std::sscanf(std::getenv(var), "%d,%d,%d,%d", &l.tp, &l.cp, &l.pp, &l.dp);
    return l;
  };
  Placement p;
  if (!parse_placement(std::getenv("TEST_PLACEMENT"), p)) throw std::runtime_error("bad TEST_PLACEMENT");
  return resolve_placement(p, layout("TEST_ENCODER"), layout("TEST_LLM"));
}

std::pair<int, std::string> run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, std::strerror(errno)};
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

}  // namespace hetpar::test

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], hetpar::test::kWorkerFlag, std::strlen(hetpar::test::kWorkerFlag)) == 0) {
      hetpar::test::run_as_worker(argv[i] + std::strlen(hetpar::test::kWorkerFlag));
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
