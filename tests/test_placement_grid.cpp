// Rank grids against a brute-force enumeration, and placement validation.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "parallel/placement.hpp"
#include "parallel/rank_grid.hpp"
#include "parallel/rank_parts.hpp"

namespace hetpar {
namespace {

// Brute force: list every coordinate in rank order (pp slowest, then dp, cp,
// tp fastest) and find groups by filtering on the coordinates held fixed.
struct BruteForce {
  std::vector<GridCoord> coords;  // index = rank - offset
  explicit BruteForce(const Layout& l) {
    for (int pp = 0; pp < l.pp; ++pp)
      for (int dp = 0; dp < l.dp; ++dp)
        for (int cp = 0; cp < l.cp; ++cp)
          for (int tp = 0; tp < l.tp; ++tp) coords.push_back({tp, cp, dp, pp});
  }
  static bool same_group(GroupKind kind, const GridCoord& a, const GridCoord& b) {
    switch (kind) {
      case GroupKind::kTp: return a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
      case GroupKind::kCp: return a.tp == b.tp && a.dp == b.dp && a.pp == b.pp;
      case GroupKind::kDp: return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp;
      case GroupKind::kPp: return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp;
      case GroupKind::kDataContext: return a.tp == b.tp && a.pp == b.pp;
      case GroupKind::kModel: return a.cp == b.cp && a.dp == b.dp;
    }
    return false;
  }
  std::vector<int> group(GroupKind kind, int index, int offset) const {
    std::vector<int> out;
    for (size_t j = 0; j < coords.size(); ++j) {
      if (same_group(kind, coords[index], coords[j])) out.push_back(offset + static_cast<int>(j));
    }
    return out;
  }
};

struct GridCase {
  Layout layout;
  int offset;
};
void PrintTo(const GridCase& c, std::ostream* os) { *os << c.layout.to_string() << "@" << c.offset; }

class GridVsBruteForce : public ::testing::TestWithParam<GridCase> {};

TEST_P(GridVsBruteForce, CoordinatesAndEveryGroup) {
  const auto [layout, offset] = GetParam();
  const RankGrid grid(layout, offset);
  const BruteForce brute(layout);
  ASSERT_EQ(static_cast<int>(brute.coords.size()), grid.size());
  EXPECT_FALSE(grid.contains(offset - 1));
  EXPECT_FALSE(grid.contains(offset + grid.size()));
  for (int i = 0; i < grid.size(); ++i) {
    const int rank = offset + i;
    EXPECT_EQ(grid.coord(rank), brute.coords[i]) << "rank " << rank;
    EXPECT_EQ(grid.rank(brute.coords[i]), rank);
    for (GroupKind kind : kAllGroupKinds) {
      EXPECT_EQ(grid.group_of(kind, rank), brute.group(kind, i, offset))
          << layout.to_string() << " rank " << rank << " kind " << to_string(kind);
    }
  }
  for (GroupKind kind : kAllGroupKinds) {  // the groups of a kind partition the grid
    std::multiset<int> seen;
    for (const auto& g : grid.all_groups(kind)) seen.insert(g.begin(), g.end());
    EXPECT_EQ(static_cast<int>(seen.size()), grid.size());
    for (int r = offset; r < offset + grid.size(); ++r) EXPECT_EQ(seen.count(r), 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GridVsBruteForce,
                         ::testing::Values(GridCase{Layout{1, 1, 1, 1}, 0}, GridCase{Layout{2, 1, 1, 2}, 0},
                                           GridCase{Layout{2, 2, 2, 2}, 0}, GridCase{Layout{4, 1, 2, 1}, 3},
                                           GridCase{Layout{1, 3, 1, 2}, 4}, GridCase{Layout{3, 1, 2, 2}, 8},
                                           GridCase{Layout{2, 2, 1, 3}, 12}));

TEST(Grid, TpGroupsAreConsecutiveRanks) {
  const RankGrid grid({4, 1, 1, 2}, 8);
  EXPECT_EQ(grid.group_of(GroupKind::kTp, 13), (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(grid.group_of(GroupKind::kDp, 13), (std::vector<int>{9, 13}));
}

TEST(Grid, RejectsRanksOutsideAndBadLayouts) {
  const RankGrid grid({2, 1, 1, 2}, 4);
  EXPECT_THROW(grid.coord(3), std::out_of_range);
  EXPECT_THROW(grid.coord(8), std::out_of_range);
  EXPECT_THROW(RankGrid({0, 1, 1, 1}, 0), std::invalid_argument);
}

TEST(Placement, Colocated) {
  const auto p = resolve_placement(Placement::Colocated, {1, 1, 1, 4}, {2, 1, 1, 2});
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.encoder_ranks, (RankRange{0, 4}));
  EXPECT_EQ(p.llm_ranks, (RankRange{0, 4}));
}

TEST(Placement, NonColocatedIsDisjointAndAdds) {
  const auto p = resolve_placement(Placement::NonColocated, {1, 1, 1, 4}, {2, 1, 1, 4});
  EXPECT_EQ(p.world_size, 12);
  EXPECT_EQ(p.encoder_ranks, (RankRange{0, 4}));
  EXPECT_EQ(p.llm_ranks, (RankRange{4, 8}));
}

TEST(Placement, UniformInheritsTheLlmLayout) {
  const auto p = resolve_placement(Placement::Uniform, {}, {2, 1, 1, 3});
  EXPECT_EQ(p.encoder, (Layout{2, 1, 1, 3}));
  EXPECT_EQ(p.encoder_ranks, p.llm_ranks);
  EXPECT_EQ(p.world_size, 6);
}

// The kinds of rank by what they hold: pp is the slowest grid dimension, so
// a stage's ranks are a run of them.
TEST(Placement, RankPartsGroupEachStagesRanks) {
  using Parts = std::vector<std::pair<std::string, std::vector<int>>>;
  const auto parts = [](const ModulePlacement& p) {
    Parts out;
    for (const RankPart& part : rank_parts(p)) out.emplace_back(part.what, part.ranks);
    return out;
  };
  EXPECT_EQ(parts(resolve_placement(Placement::Uniform, {}, {2, 1, 2, 1})),
            (Parts{{"encoder stage 0 + llm stage 0", {0, 1}}, {"llm stage 1", {2, 3}}}));
  EXPECT_EQ(parts(resolve_placement(Placement::Colocated, {1, 1, 1, 4}, {1, 1, 2, 2})),
            (Parts{{"encoder stage 0 + llm stage 0", {0, 1}}, {"encoder stage 0 + llm stage 1", {2, 3}}}));
  EXPECT_EQ(parts(resolve_placement(Placement::NonColocated, {1, 1, 2, 1}, {2, 1, 1, 1})),
            (Parts{{"encoder stage 0", {0}}, {"encoder stage 1", {1}}, {"llm stage 0", {2, 3}}}));
}

// Each impossible placement is rejected with a message naming what is wrong.
TEST(Placement, ImpossibleOnesNameBothLayouts) {
  auto message = [](Placement pl, Layout e, Layout l) -> std::string {
    try {
      resolve_placement(pl, e, l);
    } catch (const PlacementError& err) {
      return err.what();
    }
    return "(accepted)";
  };
  const std::string coloc = message(Placement::Colocated, {1, 1, 1, 2}, {2, 1, 1, 2});
  EXPECT_NE(coloc.find("encoder tp1.cp1.pp1.dp2 (2 ranks)"), std::string::npos) << coloc;
  EXPECT_NE(coloc.find("llm tp2.cp1.pp1.dp2 (4 ranks)"), std::string::npos) << coloc;
  const std::string uni = message(Placement::Uniform, {1, 1, 1, 2}, {2, 1, 1, 1});
  EXPECT_NE(uni.find("uniform"), std::string::npos) << uni;
  EXPECT_NE(uni.find("encoder tp1.cp1.pp1.dp2"), std::string::npos) << uni;
  const std::string zero = message(Placement::NonColocated, {1, 1, 1, 1}, {1, 0, 1, 1});
  EXPECT_NE(zero.find("llm layout tp1.cp0.pp1.dp1: cp must be >= 1"), std::string::npos) << zero;
}

TEST(Placement, RangesMustBeIdenticalOrDisjoint) {
  EXPECT_NO_THROW(check_rank_ranges({0, 4}, {0, 4}));
  EXPECT_NO_THROW(check_rank_ranges({0, 4}, {4, 2}));
  EXPECT_NO_THROW(check_rank_ranges({6, 2}, {0, 6}));
  EXPECT_THROW(check_rank_ranges({0, 4}, {2, 4}), PlacementError);
  EXPECT_THROW(check_rank_ranges({0, 4}, {0, 2}), PlacementError);
}

}  // namespace
}  // namespace hetpar
