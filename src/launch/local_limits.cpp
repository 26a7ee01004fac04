#include "launch/local_limits.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "metrics/model_flops.hpp"
#include "plan/memory_model.hpp"

namespace hetpar {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kRanksPerCore = 4;

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / kGiB);
  return buf;
}

// A "Field:   123456 kB" line of a /proc file -> bytes; 0 when absent.
double proc_kib_field(const char* file, const std::string& field) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(field.size() + 1));
    double kib = 0;
    fields >> kib;
    return kib * 1024.0;
  }
  return 0;
}

double meminfo_available() { return proc_kib_field("/proc/meminfo", "MemAvailable"); }

// cgroup v2: memory.max ("max" = no limit) minus memory.current.
double cgroup_remaining() {
  std::ifstream max_in("/sys/fs/cgroup/memory.max"), current_in("/sys/fs/cgroup/memory.current");
  std::string max_text;
  double current = 0;
  if (!(max_in >> max_text) || max_text == "max" || !(current_in >> current)) return 0;
  try {
    return std::max(0.0, std::stod(max_text) - current);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

double total_memory_bytes() { return proc_kib_field("/proc/meminfo", "MemTotal"); }

double resident_bytes() { return proc_kib_field("/proc/self/status", "VmRSS"); }

int max_local_ranks() { return kRanksPerCore * usable_cores(); }

double available_memory_bytes() {
  const double meminfo = meminfo_available(), cgroup = cgroup_remaining();
  if (meminfo > 0 && cgroup > 0) return std::min(meminfo, cgroup);
  return std::max(meminfo, cgroup);
}

RankMemoryEstimate estimate_rank_memory(const RunConfig& c) {
  const ModulePlacement& p = c.placement;
  // Doubles throughout: absurd sizes must give an absurd estimate, not wrap.
  const double encoder_params = static_cast<double>(encoder_parameters(c.encoder)) +
                                static_cast<double>(projector_parameters(c.encoder, c.llm));
  const double llm_params = static_cast<double>(llm_parameters(c.llm));
  // A frozen encoder's projector still trains; counting it as frozen keeps this a lower bound.
  const double encoder_bytes =
      parameter_state_bytes(encoder_params, !c.encoder.frozen) / static_cast<double>(p.encoder.tp * p.encoder.pp);
  // A micro-batch's logits and their gradient, fp32: this rank's vocab shard of its CP part of each sequence.
  const double logits = 2.0 * 4.0 * static_cast<double>(c.data.micro_batch_size) * static_cast<double>(c.llm.seq_len) *
                        static_cast<double>(c.llm.vocab_size) / static_cast<double>(p.llm.tp * p.llm.cp);
  const double llm_bytes =
      parameter_state_bytes(llm_params, true) / static_cast<double>(p.llm.tp * p.llm.pp) + logits;
  const bool shared = p.placement != Placement::NonColocated;
  RankMemoryEstimate e;
  e.bytes = shared ? encoder_bytes + llm_bytes : std::max(encoder_bytes, llm_bytes);
  e.module = llm_bytes >= encoder_bytes ? "llm" : "encoder";
  e.breakdown = "encoder + projector " + gib(encoder_bytes) + " (" + std::to_string(static_cast<int64_t>(encoder_params)) +
                " parameters / tp " + std::to_string(p.encoder.tp) + " / pp " + std::to_string(p.encoder.pp) + "), llm " + gib(llm_bytes) + " (" +
                std::to_string(static_cast<int64_t>(llm_params)) + " parameters / tp " + std::to_string(p.llm.tp) +
                " / pp " + std::to_string(p.llm.pp) + ", and the logits)";
  return e;
}

std::string local_rank_count_problem(const RunConfig& config, int ranks, bool oversubscribe,
                                     const std::string& remedy) {
  if (oversubscribe || ranks <= max_local_ranks()) return "";
  const ModulePlacement& p = config.placement;
  return "the layout needs " + std::to_string(ranks) + " ranks (encoder " + p.encoder.to_string() + ", llm " +
         p.llm.to_string() + ", " + to_string(p.placement) + "), more than " + std::to_string(max_local_ranks()) +
         " (" + std::to_string(kRanksPerCore) + " per core on " + std::to_string(usable_cores()) +
         " cores) that this machine can host; check the layout, or " + remedy;
}

std::string local_memory_problem(const RunConfig& config, int ranks_here) {
  const double available = available_memory_bytes();
  const RankMemoryEstimate e = estimate_rank_memory(config);
  if (available <= 0 || e.bytes * ranks_here <= available) return "";
  const std::string keys = e.module == "llm" ? "llm.hidden = " + std::to_string(config.llm.hidden) + ", llm.layers = " +
                                                   std::to_string(config.llm.layers) + ", llm.vocab_size = " +
                                                   std::to_string(config.llm.vocab_size)
                                             : "encoder.hidden = " + std::to_string(config.encoder.hidden) +
                                                   ", encoder.layers = " + std::to_string(config.encoder.layers);
  return "the model cannot fit: " + std::to_string(ranks_here) + " rank(s) here need at least " +
         gib(e.bytes * ranks_here) + " for weights, gradients and optimizer state alone (largest rank " +
         gib(e.bytes) + ": " + e.breakdown + "; " + keys + "), but this machine has " + gib(available) +
         " available";
}

}  // namespace hetpar
