// Both modules' groups built on real ranks, for colocated, non-colocated and
// uniform placements: each group's membership matches the grid, and each
// group really connects exactly those ranks (a reduction of job ranks).
#include <ATen/ATen.h>

#include "dist/module_groups.hpp"
#include "tests/dist_harness.hpp"

namespace hetpar::test {
namespace {

HETPAR_WORKER(job_groups) {
  const ModulePlacement placement = placement_from_env();
  JobGroups groups(rt, placement);
  int modules_here = 0;
  for (ModuleGroups* m : {&groups.encoder(), &groups.llm()}) {
    const RankRange range = m == &groups.encoder() ? placement.encoder_ranks : placement.llm_ranks;
    require(m->active() == range.contains(rt.rank()), "{} active flag", m->module());
    if (!m->active()) continue;
    ++modules_here;
    for (GroupKind kind : kAllGroupKinds) {
      Group& g = m->get(kind);
      require(g.ranks() == m->grid().group_of(kind, rt.rank()), "{} {} members", m->module(), to_string(kind));
      at::Tensor t = at::full({1}, rt.rank(), at::kLong);
      g.all_reduce(t);
      int64_t want = 0;
      for (int r : g.ranks()) want += r;
      require(t.item<int64_t>() == want, "{} {} sum {} != {}", m->module(), to_string(kind), t.item<int64_t>(), want);
    }
  }
  require(modules_here >= 1, "rank {} is in no module", rt.rank());
}

// Ranks that disagree on the group list get an error, not a deadlock.
HETPAR_WORKER(mismatched_group_lists) {
  std::vector<GroupSpec> specs{{"a", {0, 1}}};
  if (rt.rank() == 1) specs.push_back({"b", {0, 1}});  // rank 1 wants one more group
  rt.create_groups(specs);
}

class JobGroupsOnRanks : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(JobGroupsOnRanks, MembershipAndConnectivity) {
  EXPECT_TRUE(all_ranks_succeeded(run_placement_workers("job_groups", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(
    Placements, JobGroupsOnRanks,
    ::testing::Values(PlacementCase{"colocated_dp4_vs_tp2dp2", "colocated", "1,1,1,4", "2,1,1,2", 4},
                      PlacementCase{"colocated_tp2_vs_tp1cp2pp2", "colocated", "2,1,1,2", "1,2,2,1", 4},
                      PlacementCase{"noncolocated_1_plus_3", "non-colocated", "1,1,1,1", "1,1,1,3", 4},
                      PlacementCase{"noncolocated_2_plus_2", "non-colocated", "1,1,1,2", "2,1,1,1", 4},
                      PlacementCase{"uniform_tp2", "uniform", "1,1,1,1", "2,1,1,1", 2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(JobGroups, MismatchedListsFailInsteadOfHanging) {
  WorkerOptions options;
  options.timeout_ms = 4000;
  const LaunchResult r = run_workers("mismatched_group_lists", 2, options);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.ranks[1].output.find("other groups than rank 0"), std::string::npos) << r.ranks[1].output;
  EXPECT_LT(r.wall_seconds, 30.0);
}

}  // namespace
}  // namespace hetpar::test
