// One module's rank grid: its layout laid over a contiguous range of job ranks.
// Ranks are ordered tp fastest, then cp, then dp, then pp, so a TP group is a
// run of consecutive ranks (the usual order in large-scale trainers).
#pragma once

#include <vector>

#include "parallel/layout.hpp"

namespace hetpar {

struct GridCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const GridCoord&) const = default;
};

// The kinds of group a grid rank belongs to. kModel is the ranks holding one
// model replica's shards of one context chunk (tp x pp); kDataContext is the
// gradient-sync group when CP is on (dp x cp).
enum class GroupKind { kTp, kCp, kDp, kPp, kDataContext, kModel };
inline constexpr GroupKind kAllGroupKinds[] = {GroupKind::kTp, GroupKind::kCp, GroupKind::kDp,
                                               GroupKind::kPp, GroupKind::kDataContext,
                                               GroupKind::kModel};
const char* to_string(GroupKind kind);

class RankGrid {
 public:
  RankGrid(Layout layout, int offset);

  const Layout& layout() const { return layout_; }
  int offset() const { return offset_; }
  int size() const { return layout_.size(); }
  bool contains(int rank) const { return rank >= offset_ && rank < offset_ + size(); }

  GridCoord coord(int rank) const;        // rank must be in the grid
  int rank(const GridCoord& c) const;     // job rank at these coordinates

  // The job ranks of the group of `kind` that holds `rank`, in ascending order;
  // a rank's position in it is its rank inside that group.
  std::vector<int> group_of(GroupKind kind, int rank) const;
  // Every group of `kind` in this grid, each ascending, ordered by first rank.
  std::vector<std::vector<int>> all_groups(GroupKind kind) const;

 private:
  Layout layout_;
  int offset_;
};

}  // namespace hetpar
