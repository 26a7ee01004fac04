#include "parallel/rank_parts.hpp"

#include "parallel/rank_grid.hpp"

namespace hetpar {
namespace {

std::string stage_name(const char* module, int stage) { return std::string(module) + " stage " + std::to_string(stage); }

// A module's ranks by pipeline stage.
std::vector<std::vector<int>> ranks_by_stage(const Layout& layout, const RankRange& range) {
  const RankGrid grid(layout, range.offset);
  std::vector<std::vector<int>> stages(layout.pp);
  for (int r = range.offset; r < range.end(); ++r) stages[grid.coord(r).pp].push_back(r);
  return stages;
}

}  // namespace

std::vector<RankPart> rank_parts(const ModulePlacement& p) {
  std::vector<RankPart> parts;
  const std::vector<std::vector<int>> llm = ranks_by_stage(p.llm, p.llm_ranks);
  if (p.placement == Placement::NonColocated) {
    const std::vector<std::vector<int>> encoder = ranks_by_stage(p.encoder, p.encoder_ranks);
    for (size_t s = 0; s < encoder.size(); ++s) parts.push_back({stage_name("encoder", int(s)), encoder[s]});
    for (size_t s = 0; s < llm.size(); ++s) parts.push_back({stage_name("llm", int(s)), llm[s]});
    return parts;
  }
  const bool every_stage_encodes = p.placement == Placement::Colocated;
  for (size_t s = 0; s < llm.size(); ++s) {
    const std::string what = stage_name("llm", int(s));
    parts.push_back({every_stage_encodes || s == 0 ? "encoder stage 0 + " + what : what, llm[s]});
  }
  return parts;
}

}  // namespace hetpar
