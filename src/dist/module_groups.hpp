// The process groups of both modules of a job, built from their rank grids.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/p2p_groups.hpp"
#include "dist/runtime.hpp"
#include "parallel/placement.hpp"
#include "parallel/rank_grid.hpp"

namespace hetpar {

// This rank's view of one module: its coordinates and the group of each kind
// it is in. `active` is false on ranks outside the module (non-colocated).
class ModuleGroups {
 public:
  ModuleGroups(std::string module, RankGrid grid) : module_(std::move(module)), grid_(grid) {}

  const std::string& module() const { return module_; }
  const RankGrid& grid() const { return grid_; }
  bool active() const { return active_; }
  const GridCoord& coord() const { return coord_; }
  Group& get(GroupKind kind) const;   // throws on an inactive module
  Group& all() const;                 // every rank of the module

 private:
  friend class JobGroups;
  std::string module_;
  RankGrid grid_;
  bool active_ = false;
  GridCoord coord_;
  std::array<Group*, std::size(kAllGroupKinds)> groups_{};
  Group* all_ = nullptr;
};

class JobGroups {
 public:
  // Creates every group of both modules on every rank, in the order of
  // group_specs(): encoder then llm, each kind in kAllGroupKinds order.
  JobGroups(Runtime& runtime, const ModulePlacement& placement);

  // The full, ordered list of groups of a job (every rank's, not only mine).
  static std::vector<GroupSpec> group_specs(const ModulePlacement& placement);

  const ModulePlacement& placement() const { return placement_; }
  ModuleGroups& encoder() { return encoder_; }
  ModuleGroups& llm() { return llm_; }
  // The point-to-point links of the step schedules, made after the groups above.
  Group& p2p(P2pLink link) { return p2p_->get(link); }

 private:
  void bind(Runtime& runtime, ModuleGroups& module);

  ModulePlacement placement_;
  ModuleGroups encoder_;
  ModuleGroups llm_;
  std::unique_ptr<P2pGroups> p2p_;
};

}  // namespace hetpar
