// Multi-rank tests on real processes: a test names a worker, the harness
// re-executes this test binary as N ranks through hetpar's own local launcher,
// each rank builds a real Runtime (TCPStore + Gloo) and runs the worker.
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/runtime.hpp"
#include "parallel/placement.hpp"
#include "launch/local_launcher.hpp"

namespace hetpar::test {

using WorkerFn = std::function<void(Runtime&)>;

struct WorkerRegistrar {
  WorkerRegistrar(const std::string& name, WorkerFn fn);
};

// Defines a worker body run on every rank: HETPAR_WORKER(name) { ... rt ... }
#define HETPAR_WORKER(name)                                                       \
  static void name##_worker(::hetpar::Runtime& rt);                               \
  static ::hetpar::test::WorkerRegistrar name##_registrar(#name, name##_worker); \
  static void name##_worker([[maybe_unused]] ::hetpar::Runtime& rt)

struct WorkerOptions {
  int timeout_ms = 20'000;  // collective timeout inside the ranks
  std::vector<std::pair<std::string, std::string>> env;
};

// Runs worker `name` on `nproc` ranks and returns how each rank ended.
LaunchResult run_workers(const std::string& name, int nproc, const WorkerOptions& options = {});

// gtest assertion: every rank exited 0; otherwise prints every rank's output.
::testing::AssertionResult all_ranks_succeeded(const LaunchResult& result);

// Inside a worker: throws (so the rank fails with this message) unless `ok`.
template <typename... Args>
void require(bool ok, fmt::format_string<Args...> f, Args&&... args) {
  if (!ok) throw std::runtime_error(fmt::format(f, std::forward<Args>(args)...));
}

// Inside a worker: |got - want| <= atol + rtol * max|want|, else throws with both magnitudes.
void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what, double rtol = 1e-5,
                  double atol = 1e-6);

// A job placement handed to a worker through the environment.
struct PlacementCase {
  const char* name;
  const char* placement;  // "colocated", "non-colocated", "uniform"
  const char* encoder;    // "tp,cp,pp,dp"
  const char* llm;
  int world;
};
void PrintTo(const PlacementCase& c, std::ostream* os);
// Runs `worker` on c.world ranks with the case in their environment.
LaunchResult run_placement_workers(const std::string& worker, const PlacementCase& c);
// Inside such a worker: the case's placement, resolved.
ModulePlacement placement_from_env();

// Runs a shell command, returns (exit code, stdout+stderr).
std::pair<int, std::string> run_command(const std::string& command);

}  // namespace hetpar::test
