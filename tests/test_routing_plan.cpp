// The boundary routing plan against a brute-force enumeration: for every
// embedding row, which ranks hold it and which need it, found by scanning
// every rank's coordinates; over hundreds of (placement, layouts, ragged
// images) cases, including groups that receive nothing.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "boundary/routing_plan.hpp"
#include "parallel/rank_grid.hpp"

namespace hetpar {
namespace {

using Row = std::pair<int, int64_t>;  // (image, token)

struct Expanded {
  std::map<std::tuple<int, int, int64_t>, std::vector<int>> senders;  // (dst, image, token) -> srcs
};

Expanded expand(const Transfers& transfers) {
  Expanded out;
  for (const auto& [pair, blocks] : transfers) {
    Row last{-1, -1};
    for (const RowBlock& b : blocks) {
      EXPECT_GT(b.tokens, 0);
      EXPECT_LT(last, (Row{b.image, b.first_token})) << "blocks out of order for " << pair.first << "->" << pair.second;
      last = {b.image, b.first_token + b.tokens - 1};
      for (int64_t t = b.first_token; t < b.first_token + b.tokens; ++t) {
        out.senders[{pair.second, b.image, t}].push_back(pair.first);
      }
    }
  }
  return out;
}

void check_case(const ModulePlacement& p, const BoundaryBatch& batch, const std::string& name) {
  SCOPED_TRACE(name);
  const BoundaryPlan plan = plan_boundary(p, batch);
  const RankGrid enc(p.encoder, p.encoder_ranks.offset), llm(p.llm, p.llm_ranks.offset);
  const int samples = static_cast<int>(batch.image_starts.size());
  const int images = static_cast<int>(plan.image_sample.size());

  // Image -> encoder group: each image once, contiguous, balanced within one.
  std::vector<int> per_group(p.encoder.dp, 0);
  for (int j = 0; j < images; ++j) {
    ++per_group[plan.image_encoder_dp[j]];
    if (j > 0) EXPECT_LE(plan.image_encoder_dp[j - 1], plan.image_encoder_dp[j]);
  }
  for (int g : per_group) EXPECT_LE(g - images / p.encoder.dp, 1);
  if (p.llm.sp) ASSERT_GT(p.llm.tp, 1) << "sequence parallelism kept at tp 1";

  // Brute force: who holds and who needs each row.
  const int64_t chunk = batch.seq_len / (2 * p.llm.cp);
  auto encoder_holders = [&](int j) {
    std::set<int> out;
    for (int r = enc.offset(); r < enc.offset() + enc.size(); ++r) {
      if (enc.coord(r).dp == plan.image_encoder_dp[j]) out.insert(r);
    }
    return out;
  };
  // A rank's positions: its CP rank's two chunks, in order; under sequence
  // parallelism only its TP rank's contiguous share of that list.
  auto held_positions = [&](const GridCoord& c) {
    std::vector<int64_t> part;
    for (int64_t k : {int64_t(c.cp), int64_t(2 * p.llm.cp - 1 - c.cp)}) {
      for (int64_t q = k * chunk; q < (k + 1) * chunk; ++q) part.push_back(q);
    }
    if (!p.llm.sp) return std::set<int64_t>(part.begin(), part.end());
    const size_t share = part.size() / p.llm.tp;
    return std::set<int64_t>(part.begin() + c.tp * share, part.begin() + (c.tp + 1) * share);
  };
  auto llm_needers = [&](int j, int64_t t) {
    std::set<int> out;
    const int64_t pos = plan.image_position[j] + t;
    for (int r = llm.offset(); r < llm.offset() + llm.size(); ++r) {
      const GridCoord c = llm.coord(r);
      const bool my_sample = c.dp == plan.image_sample[j] / (samples / p.llm.dp);
      if (my_sample && held_positions(c).count(pos)) out.insert(r);
    }
    return out;
  };

  const Expanded fwd = expand(plan.forward), bwd = expand(plan.backward);
  size_t fwd_rows = 0, bwd_rows = 0;
  for (int j = 0; j < images; ++j) {
    const std::set<int> holders = encoder_holders(j);
    for (int64_t t = 0; t < batch.tokens_per_image; ++t) {
      const std::set<int> needers = llm_needers(j, t);
      ASSERT_FALSE(needers.empty());
      for (int dst : needers) {  // every needer gets the row once, from a holder
        const auto it = fwd.senders.find({dst, j, t});
        ASSERT_NE(it, fwd.senders.end()) << "rank " << dst << " never gets image " << j << " row " << t;
        ASSERT_EQ(it->second.size(), 1u) << "rank " << dst << " gets image " << j << " row " << t << " twice";
        EXPECT_TRUE(holders.count(it->second[0])) << "sent by rank " << it->second[0] << ", which lacks it";
        ++fwd_rows;
      }
      for (int dst : holders) {  // every encoder TP rank gets the gradient once, from a needer
        const auto it = bwd.senders.find({dst, j, t});
        ASSERT_NE(it, bwd.senders.end()) << "encoder rank " << dst << " never gets the grad of " << j << "/" << t;
        ASSERT_EQ(it->second.size(), 1u) << "gradient replicas summed: image " << j << " row " << t;
        EXPECT_TRUE(needers.count(it->second[0]));
        ++bwd_rows;
      }
    }
  }
  EXPECT_EQ(fwd.senders.size(), fwd_rows) << "rows sent to ranks that do not need them";
  EXPECT_EQ(bwd.senders.size(), bwd_rows) << "gradients sent to ranks that do not hold the row";

  // Senders spread: a group with at least tp images uses every TP rank.
  std::set<int> forward_senders;
  for (const auto& [pair, blocks] : plan.forward) forward_senders.insert(pair.first);
  for (int g = 0; g < p.encoder.dp; ++g) {
    if (per_group[g] < p.encoder.tp) continue;
    for (int tp = 0; tp < p.encoder.tp; ++tp) EXPECT_TRUE(forward_senders.count(enc.rank({tp, 0, g, 0})));
  }
}

// Ragged image patterns for 6 samples of 48 tokens with 5-token images (they
// straddle CP chunk boundaries), including no images at all.
std::vector<std::vector<std::vector<int64_t>>> image_patterns() {
  return {
      {{1}, {}, {2, 20, 40}, {1}, {}, {30}},
      {{}, {}, {}, {}, {}, {}},
      {{0, 5, 10, 15, 20, 25}, {}, {}, {}, {}, {43}},
      {{9}, {9}, {9}, {9}, {9}, {9}},
      {{}, {}, {}, {}, {3, 11}, {}},
  };
}

TEST(RoutingPlan, AgreesWithBruteForceOverManyCases) {
  int cases = 0;
  for (Placement pl : {Placement::Colocated, Placement::NonColocated, Placement::Uniform}) {
    for (int etp : {1, 2}) for (int edp : {1, 2, 3, 4})
    for (int ltp : {1, 2, 4}) for (int lcp : {1, 2}) for (int ldp : {1, 2, 3}) for (bool sp : {false, true}) {
      if (sp && ltp == 1) continue;
      const Layout e{etp, 1, 1, edp}, l{ltp, lcp, 1, ldp, sp};
      ModulePlacement p;
      try {
        p = resolve_placement(pl, pl == Placement::Uniform ? Layout{} : e, l);
      } catch (const PlacementError&) {
        continue;  // e.g. colocated with different rank counts
      }
      if (pl == Placement::Uniform && (etp != 1 || edp != 1)) continue;
      if (p.encoder.cp > 1) {  // uniform with CP: the encoder would inherit it, and it has none
        EXPECT_THROW(plan_boundary(p, {48, 5, image_patterns()[0]}), std::invalid_argument);
        continue;
      }
      for (const auto& pattern : image_patterns()) {
        check_case(p, {48, 5, pattern}, to_string(pl) + " enc " + e.to_string() + " llm " + l.to_string());
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(RoutingPlan, FanInAndFanOutExamples) {
  // 4 -> 1: four encoder replicas feed one LLM replica (non-colocated).
  const ModulePlacement fan_in = resolve_placement(Placement::NonColocated, {1, 1, 1, 4}, {2, 1, 1, 1});
  const BoundaryPlan a = plan_boundary(fan_in, {16, 2, {{0}, {4}, {8}, {12}}});
  EXPECT_EQ(a.forward.size(), 8u);  // 4 senders x 2 LLM TP ranks
  // 1 -> 4: one encoder replica feeds four LLM replicas (colocated on 4 ranks).
  const ModulePlacement fan_out = resolve_placement(Placement::Colocated, {4, 1, 1, 1}, {1, 1, 1, 4});
  const BoundaryPlan b = plan_boundary(fan_out, {16, 2, {{0}, {4}, {8}, {12}}});
  for (int dst = 0; dst < 4; ++dst) {  // each LLM replica gets its one image, from tp rank j % 4
    EXPECT_EQ(b.forward.at({dst, dst}), (std::vector<RowBlock>{{dst, 0, 2}}));
  }
  // The gradient of image j goes back to all 4 encoder TP ranks, once each.
  for (int enc = 0; enc < 4; ++enc) EXPECT_EQ(b.backward.at({0, enc}), (std::vector<RowBlock>{{0, 0, 2}}));
}

TEST(RoutingPlan, RejectsWhatItCannotRoute) {
  const ModulePlacement p = resolve_placement(Placement::NonColocated, {1, 1, 1, 1}, {1, 1, 1, 2});
  EXPECT_THROW(plan_boundary(p, {16, 2, {{0}, {}, {}}}), std::invalid_argument);  // 3 samples, dp 2
  EXPECT_THROW(plan_boundary(p, {16, 4, {{0, 2}, {}}}), std::invalid_argument);   // overlapping images
  EXPECT_THROW(plan_boundary(p, {16, 4, {{14}, {}}}), std::invalid_argument);     // past the end
  const ModulePlacement encoder_cp = resolve_placement(Placement::NonColocated, {1, 2, 1, 1}, {1, 1, 1, 1});
  EXPECT_THROW(plan_boundary(encoder_cp, {16, 2, {{0}}}), std::invalid_argument);
}

// Under encoder PP only the last stage sends: encoder PP2 x DP2 on ranks 0-3,
// of which 2 and 3 are its last stage (dp 0 and 1), to the LLM on rank 4.
TEST(RoutingPlan, EncoderPipelineSendsFromItsLastStageOnly) {
  const ModulePlacement p = resolve_placement(Placement::NonColocated, {1, 1, 2, 2}, {1, 1, 1, 1});
  const BoundaryPlan b = plan_boundary(p, {16, 2, {{3}, {8}}});
  EXPECT_EQ(b.image_encoder_dp, (std::vector<int>{0, 1}));
  const Transfers forward{{{2, 4}, {{0, 0, 2}}}, {{3, 4}, {{1, 0, 2}}}};
  EXPECT_EQ(b.forward, forward);
  const Transfers backward{{{4, 2}, {{0, 0, 2}}}, {{4, 3}, {{1, 0, 2}}}};
  EXPECT_EQ(b.backward, backward);
}

// Under LLM PP only the first stage embeds: encoder rank 0 -> LLM TP2 x PP2
// on ranks 1-4, of which 1 and 2 are stage 0 (pp is the slowest dimension).
TEST(RoutingPlan, LlmPipelineTakesRowsOnItsFirstStageOnly) {
  const ModulePlacement p = resolve_placement(Placement::NonColocated, {1, 1, 1, 1}, {2, 1, 2, 1});
  const BoundaryPlan b = plan_boundary(p, {16, 2, {{3}}});
  const Transfers forward{{{0, 1}, {{0, 0, 2}}}, {{0, 2}, {{0, 0, 2}}}};
  EXPECT_EQ(b.forward, forward);
  const Transfers backward{{{1, 0}, {{0, 0, 2}}}};
  EXPECT_EQ(b.backward, backward);
}

// Under sequence parallelism an image's rows go to the TP ranks holding their
// positions, split where the sequence passes from one to the next, and each
// part's gradient comes back from the rank that took it: encoder rank 0 ->
// LLM TP2 on ranks 1-2, positions [0, 8) on rank 1 and [8, 16) on rank 2.
TEST(RoutingPlan, SequenceParallelSendsEachRowToTheTpRankHoldingIt) {
  const ModulePlacement p = resolve_placement(Placement::NonColocated, {1, 1, 1, 1}, {2, 1, 1, 1, true});
  ASSERT_TRUE(p.llm.sp);
  EXPECT_EQ(p.llm.sequence_parts(), 2);
  const BoundaryPlan b = plan_boundary(p, {16, 4, {{6}}});
  const Transfers forward{{{0, 1}, {{0, 0, 2}}}, {{0, 2}, {{0, 2, 2}}}};
  EXPECT_EQ(b.forward, forward);
  const Transfers backward{{{1, 0}, {{0, 0, 2}}}, {{2, 0}, {{0, 2, 2}}}};
  EXPECT_EQ(b.backward, backward);
  // At tp 1 there is nothing to split: resolve_placement clears it.
  const Layout tp1 = resolve_placement(Placement::NonColocated, {1, 1, 1, 1}, {1, 1, 1, 2, true}).llm;
  EXPECT_FALSE(tp1.sp);
  EXPECT_EQ(tp1.sequence_parts(), 1);
  EXPECT_EQ((Layout{4, 2, 1, 1}.sequence_parts()), 1);  // TP alone: every TP rank holds the whole sequence
  // The encoder's is not built.
  EXPECT_THROW(resolve_placement(Placement::NonColocated, {2, 1, 1, 1, true}, {1, 1, 1, 1}), PlacementError);
}

}  // namespace
}  // namespace hetpar
