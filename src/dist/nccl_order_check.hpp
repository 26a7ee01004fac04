// Checks a job's communication trace (dist/comm_trace_format.hpp) against
// NCCL's rules, on traces recorded on any backend (Gloo in CI):
// - matching: sends and receives pair per (communicator, src, dst) in issue
//   order, whatever their tags; collectives pair per communicator in order;
//   a pair whose tag, size or type differ is a mismatch;
// - progress: every op of a rank on one communicator runs in issue order on
//   that communicator's one stream; an op starts when the ops before it on its
//   stream have finished and so has everything the host waited on before
//   posting it; a send and its receive (and a collective's members) finish
//   together once all have started; a coalesced batch starts as a unit and
//   finishes when all its ops have. A run that cannot finish is a deadlock.
// This is stricter than NCCL needs (a small send may finish before its
// receive runs), so a trace that passes cannot hang on this account.
#pragma once

#include <string>
#include <vector>

#include "dist/comm_trace_format.hpp"

namespace hetpar {

struct OrderCheck {
  std::vector<std::string> mismatches;  // pairings that differ in tag, size or kind, or lack a partner
  std::vector<std::string> deadlock;    // one line per stuck rank: its first blocked op and why
  int64_t ops = 0;                      // ops checked, all ranks
  bool ok() const { return mismatches.empty() && deadlock.empty(); }
  std::string summary() const;          // every finding, one per line
};

OrderCheck check_nccl_order(const std::vector<RankTrace>& ranks);

}  // namespace hetpar
