// The point-to-point communicators of a step: one per channel (the boundary,
// the LLM's stages, the encoder's stages) and direction (data forward,
// gradients back), each over the whole job. On NCCL every op of a rank on one
// communicator runs in issue order on one stream and tags are ignored, so a
// rank that posts rows of micro-batch m+1 before it receives the gradient of
// m, while its peer does the opposite, deadlocks on a shared communicator;
// on communicators of their own the two directions cannot block each other
// (docs/design.md, "Point-to-point order under NCCL").
#pragma once

#include <array>

#include "dist/runtime.hpp"
#include "parallel/placement.hpp"

namespace hetpar {

enum class P2pLink : int { kBoundaryData, kBoundaryGradient, kLlmData, kLlmGradient, kEncoderData, kEncoderGradient };
inline constexpr int kP2pLinks = 6;

class P2pGroups {
 public:
  // Creates the links `placement` uses, on every rank, in P2pLink order.
  P2pGroups(Runtime& runtime, const ModulePlacement& placement);
  // Throws if the placement does not use `link`. Member i is job rank i.
  Group& get(P2pLink link) const;

 private:
  std::array<Group*, kP2pLinks> groups_{};  // owned by the Runtime, which shuts them down in order
};

}  // namespace hetpar
