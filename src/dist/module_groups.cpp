#include "dist/module_groups.hpp"

#include <fmt/format.h>

namespace hetpar {
namespace {

std::vector<int> range_ranks(const RankGrid& grid) {
  std::vector<int> r;
  for (int i = grid.offset(); i < grid.offset() + grid.size(); ++i) r.push_back(i);
  return r;
}

void append_module_specs(const std::string& module, const RankGrid& grid,
                         std::vector<GroupSpec>& out) {
  out.push_back({module + ".all", range_ranks(grid)});
  for (GroupKind kind : kAllGroupKinds) {
    for (auto& ranks : grid.all_groups(kind)) {
      out.push_back({fmt::format("{}.{}", module, to_string(kind)), std::move(ranks)});
    }
  }
}

}  // namespace

Group& ModuleGroups::get(GroupKind kind) const {
  if (!active_) throw std::logic_error("this rank holds no part of the " + module_);
  return *groups_[static_cast<size_t>(kind)];
}

Group& ModuleGroups::all() const {
  if (!active_) throw std::logic_error("this rank holds no part of the " + module_);
  return *all_;
}

std::vector<GroupSpec> JobGroups::group_specs(const ModulePlacement& p) {
  std::vector<GroupSpec> specs;
  append_module_specs("encoder", RankGrid(p.encoder, p.encoder_ranks.offset), specs);
  append_module_specs("llm", RankGrid(p.llm, p.llm_ranks.offset), specs);
  return specs;
}

JobGroups::JobGroups(Runtime& runtime, const ModulePlacement& placement)
    : placement_(placement),
      encoder_("encoder", RankGrid(placement.encoder, placement.encoder_ranks.offset)),
      llm_("llm", RankGrid(placement.llm, placement.llm_ranks.offset)) {
  if (placement.world_size != runtime.world_size()) {
    throw std::logic_error(fmt::format("placement needs {} ranks, the job has {}",
                                       placement.world_size, runtime.world_size()));
  }
  runtime.create_groups(group_specs(placement));
  bind(runtime, encoder_);
  bind(runtime, llm_);
  p2p_ = std::make_unique<P2pGroups>(runtime, placement);
}

void JobGroups::bind(Runtime& runtime, ModuleGroups& m) {
  const int rank = runtime.rank();
  m.active_ = m.grid_.contains(rank);
  if (!m.active_) return;
  m.coord_ = m.grid_.coord(rank);
  m.all_ = &runtime.group(range_ranks(m.grid_));
  for (GroupKind kind : kAllGroupKinds) {
    m.groups_[static_cast<size_t>(kind)] = &runtime.group(m.grid_.group_of(kind, rank));
  }
}

}  // namespace hetpar
