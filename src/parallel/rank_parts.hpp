// The kinds of rank by what they hold in memory: a module's pipeline stage,
// or on colocated and uniform ranks one of each module's. The memory model
// predicts one peak per part (plan/memory_model.hpp) and the trainer reports
// the largest measured peak among each part's ranks, so the two meet by name.
#pragma once

#include <string>
#include <vector>

#include "parallel/placement.hpp"

namespace hetpar {

struct RankPart {
  std::string what;        // "llm stage 1", "encoder stage 0 + llm stage 0", ...
  std::vector<int> ranks;  // its job ranks, ascending
};

// Every rank in exactly one part:
// - uniform: the LLM's first stage holds the encoder too;
// - colocated: every LLM stage holds the encoder's one stage;
// - non-colocated: the encoder's stages, then the LLM's.
std::vector<RankPart> rank_parts(const ModulePlacement& placement);

}  // namespace hetpar
