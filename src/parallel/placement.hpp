// Where each module's ranks live in the job, checked before any group exists.
#pragma once

#include <stdexcept>
#include <string>

#include "parallel/layout.hpp"

namespace hetpar {

// Ranks [offset, offset + size) of the job.
struct RankRange {
  int offset = 0;
  int size = 0;
  int end() const { return offset + size; }
  bool contains(int rank) const { return rank >= offset && rank < end(); }
  bool operator==(const RankRange&) const = default;
};

struct ModulePlacement {
  Placement placement = Placement::Uniform;
  Layout encoder;            // for Uniform: `llm` with pp 1, on the LLM's first stage
  Layout llm;
  RankRange encoder_ranks;
  RankRange llm_ranks;
  int world_size = 0;
};

// A placement that cannot be built; the message names both layouts.
class PlacementError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// colocated:     both modules on [0, W); W = encoder.size() = llm.size()
// non-colocated: encoder on [0, E), LLM on [E, E + L)
// uniform:       the encoder inherits the LLM's layout and ranks (with LLM
//                PP: those of its first stage); a given encoder layout must
//                be the default (all 1) or equal to the LLM's (but for sp)
// The LLM's sp holds only with tp > 1; the encoder's is refused (not built).
// Throws PlacementError otherwise (also for any dimension < 1).
ModulePlacement resolve_placement(Placement placement, const Layout& encoder, const Layout& llm);

// Two modules' rank ranges must be identical or disjoint; throws otherwise.
void check_rank_ranges(const RankRange& encoder, const RankRange& llm);

}  // namespace hetpar
