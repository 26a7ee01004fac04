// What one machine can host, checked before anything is spawned: a layout
// that multiplies out to 100,000 ranks or a model that cannot fit must be
// refused with one message, not discovered by the kernel's OOM killer.
#pragma once

#include <string>

#include "config/run_config.hpp"

namespace hetpar {

// Cores this process may run on (its CPU affinity).
int usable_cores();

// Local ranks allowed without --oversubscribe: 4 per usable core.
int max_local_ranks();

// Bytes of memory this process can still use: the smaller of the kernel's
// MemAvailable and the cgroup's remaining limit; 0 when unknown.
double available_memory_bytes();

// MemTotal of this machine (0 when unknown): what all local ranks share.
double total_memory_bytes();

// This process's resident memory now (VmRSS; 0 when unknown).
double resident_bytes();

// A lower bound of one rank's resident memory for `config` on CPU in fp32:
// its shards of the weights, gradients and AdamW state of each module it
// holds, plus one micro-batch's logits and their gradient. Activations are
// left out, so a run refused on this bound could never have fit.
struct RankMemoryEstimate {
  double bytes = 0;        // on the fullest rank
  std::string module;      // "encoder" or "llm": the larger part of it
  std::string breakdown;   // what the bytes are, for the message
};
RankMemoryEstimate estimate_rank_memory(const RunConfig& config);

// "" when the local launcher may start `ranks` ranks, else why not (naming
// the layout), ending in `remedy`: what the calling command offers instead.
// `oversubscribe` lifts the bound.
std::string local_rank_count_problem(const RunConfig& config, int ranks, bool oversubscribe, const std::string& remedy);

// "" when `ranks_here` ranks of `config` fit in this machine's available
// memory by the lower bound above, else why not (naming the module's keys).
std::string local_memory_problem(const RunConfig& config, int ranks_here);

}  // namespace hetpar
