#include "dist/p2p_groups.hpp"

#include <fmt/format.h>

namespace hetpar {
namespace {

constexpr const char* kNames[kP2pLinks] = {"p2p.boundary.data", "p2p.boundary.gradient", "p2p.llm.data",
                                           "p2p.llm.gradient",  "p2p.encoder.data",      "p2p.encoder.gradient"};

bool uses(const ModulePlacement& p, P2pLink link) {
  switch (link) {
    case P2pLink::kBoundaryData:
    case P2pLink::kBoundaryGradient:  // the boundary's point-to-point halves
      return p.placement == Placement::NonColocated || (p.placement == Placement::Colocated && p.llm.pp > 1);
    case P2pLink::kLlmData:
    case P2pLink::kLlmGradient: return p.llm.pp > 1;
    case P2pLink::kEncoderData:
    case P2pLink::kEncoderGradient: return p.encoder.pp > 1;
  }
  return false;
}

}  // namespace

P2pGroups::P2pGroups(Runtime& runtime, const ModulePlacement& placement) {
  if (runtime.world_size() == 1) return;
  // Communicators of their own: the Runtime shares one per rank set, and
  // every link spans the world as the world group does.
  const std::vector<int>& world = runtime.world().ranks();
  for (int i = 0; i < kP2pLinks; ++i) {
    if (uses(placement, static_cast<P2pLink>(i))) groups_[i] = &runtime.create_separate_group({kNames[i], world});
  }
}

Group& P2pGroups::get(P2pLink link) const {
  const auto& g = groups_[static_cast<int>(link)];
  if (!g) throw std::logic_error(fmt::format("this placement has no {} link", kNames[static_cast<int>(link)]));
  return *g;
}

}  // namespace hetpar
