#include "parallel/rank_grid.hpp"

#include <stdexcept>
#include <string>

namespace hetpar {
namespace {

// Which coordinates vary inside a group of each kind.
struct Varies {
  bool tp, cp, dp, pp;
};

Varies varies(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp: return {true, false, false, false};
    case GroupKind::kCp: return {false, true, false, false};
    case GroupKind::kDp: return {false, false, true, false};
    case GroupKind::kPp: return {false, false, false, true};
    case GroupKind::kDataContext: return {false, true, true, false};
    case GroupKind::kModel: return {true, false, false, true};
  }
  throw std::logic_error("unknown group kind");
}

}  // namespace

const char* to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp: return "tp";
    case GroupKind::kCp: return "cp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kPp: return "pp";
    case GroupKind::kDataContext: return "dp_cp";
    case GroupKind::kModel: return "model";
  }
  return "?";
}

RankGrid::RankGrid(Layout layout, int offset) : layout_(layout), offset_(offset) {
  if (layout.tp < 1 || layout.cp < 1 || layout.pp < 1 || layout.dp < 1 || offset < 0) {
    throw std::invalid_argument("invalid grid " + layout.to_string() + " at offset " +
                                std::to_string(offset));
  }
}

GridCoord RankGrid::coord(int rank) const {
  if (!contains(rank)) {
    throw std::out_of_range("rank " + std::to_string(rank) + " is not in grid " +
                            layout_.to_string() + " at offset " + std::to_string(offset_));
  }
  int r = rank - offset_;
  GridCoord c;
  c.tp = r % layout_.tp;
  r /= layout_.tp;
  c.cp = r % layout_.cp;
  r /= layout_.cp;
  c.dp = r % layout_.dp;
  c.pp = r / layout_.dp;
  return c;
}

int RankGrid::rank(const GridCoord& c) const {
  return offset_ + c.tp + layout_.tp * (c.cp + layout_.cp * (c.dp + layout_.dp * c.pp));
}

std::vector<int> RankGrid::group_of(GroupKind kind, int rank) const {
  const GridCoord me = coord(rank);
  const Varies v = varies(kind);
  std::vector<int> ranks;
  // Loop nest from slowest to fastest coordinate keeps the result ascending.
  for (int pp = 0; pp < (v.pp ? layout_.pp : 1); ++pp) {
    for (int dp = 0; dp < (v.dp ? layout_.dp : 1); ++dp) {
      for (int cp = 0; cp < (v.cp ? layout_.cp : 1); ++cp) {
        for (int tp = 0; tp < (v.tp ? layout_.tp : 1); ++tp) {
          ranks.push_back(this->rank({v.tp ? tp : me.tp, v.cp ? cp : me.cp, v.dp ? dp : me.dp,
                                      v.pp ? pp : me.pp}));
        }
      }
    }
  }
  return ranks;
}

std::vector<std::vector<int>> RankGrid::all_groups(GroupKind kind) const {
  std::vector<std::vector<int>> groups;
  for (int r = offset_; r < offset_ + size(); ++r) {
    std::vector<int> g = group_of(kind, r);
    if (g.front() == r) groups.push_back(std::move(g));  // each group once, at its first rank
  }
  return groups;
}

}  // namespace hetpar
