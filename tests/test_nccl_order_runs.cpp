// The real step schedules under NCCL's ordering rules: each case trains a
// few steps on Gloo with the communication trace on, then replays every
// rank's trace through the NCCL-order checker (dist/nccl_order_check.hpp),
// which must find no mismatched pair and no deadlock.
#include <unistd.h>

#include <filesystem>

#include "dist/nccl_order_check.hpp"
#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

struct TraceCase {
  const char* name;
  const char* sets;
};
void PrintTo(const TraceCase& c, std::ostream* os) { *os << c.name; }

class NcclOrder : public ::testing::TestWithParam<TraceCase> {};

TEST_P(NcclOrder, TheTraceHasNoMismatchAndNoDeadlock) {
  const std::string dir = ::testing::TempDir() + "/nccl_order_" + GetParam().name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const auto [code, out] = run_command("HETPAR_COMM_TRACE=" + dir + "/trace " + hetpar_binary() + " train " +
                                       source_tree_path("/workloads/tiny.toml") +
                                       " --set run.steps=2 --set data.global_batch_size=4 " +
                                       GetParam().sets + " --out " + dir + "/run");
  ASSERT_EQ(code, 0) << out;
  const OrderCheck check = check_nccl_order(read_trace_dir(dir + "/trace"));
  std::printf("%s: %lld ops checked\n", GetParam().name, static_cast<long long>(check.ops));
  EXPECT_GT(check.ops, 0);
  EXPECT_TRUE(check.ok()) << check.summary();
}

#define NONCOLOC "--set layout.placement=non-colocated --set data.micro_batch_size=1 "
#define COLOC_PP "--set layout.placement=colocated --set layout.llm.pp=2 --set data.micro_batch_size=1 "
INSTANTIATE_TEST_SUITE_P(
    Schedules, NcclOrder,
    ::testing::Values(
        TraceCase{"noncoloc_run_ahead_1", NONCOLOC "--set layout.run_ahead=1"},
        TraceCase{"noncoloc_run_ahead_2", NONCOLOC "--set layout.run_ahead=2"},
        TraceCase{"noncoloc_run_ahead_3_dp2_to_tp2", NONCOLOC "--set layout.run_ahead=3 --set layout.encoder.dp=2 --set layout.llm.tp=2"},
        TraceCase{"noncoloc_enc_pp2", NONCOLOC "--set layout.encoder.pp=2"},
        TraceCase{"noncoloc_enc_pp2_to_pp2", NONCOLOC "--set layout.encoder.pp=2 --set layout.llm.pp=2"},
        TraceCase{"uniform_pp2", "--set layout.llm.pp=2 --set data.micro_batch_size=1"},
        TraceCase{"uniform_tp2_pp2", "--set layout.llm.tp=2 --set layout.llm.pp=2 --set data.micro_batch_size=1"},
        TraceCase{"noncoloc_to_pp2", NONCOLOC "--set layout.llm.pp=2"},
        TraceCase{"coloc_pp2_bubble_fill", COLOC_PP "--set layout.encoder.dp=2"},
        TraceCase{"coloc_pp2_whole_step", COLOC_PP "--set layout.encoder.dp=2 --set layout.encoder_schedule=whole_step"},
        TraceCase{"coloc_pp2_llm_tp2", COLOC_PP "--set layout.encoder.dp=4 --set layout.llm.tp=2"},
        TraceCase{"coloc_tp2", "--set layout.placement=colocated --set layout.encoder.dp=2 --set layout.llm.tp=2"},
        // Sequence parallelism's once-a-step TP sum of the norms' gradients, after the DP reduce-scatter / in each stage.
        TraceCase{"uniform_tp2_dp2_sp_sharded", "--set layout.llm.tp=2 --set layout.llm.dp=2 --set layout.llm.sp=true "
                                                "--set optim.shard_state=true --set data.micro_batch_size=1"},
        TraceCase{"coloc_pp2_llm_tp2_sp", COLOC_PP "--set layout.encoder.dp=4 --set layout.llm.tp=2 --set layout.llm.sp=true"}),
    [](const ::testing::TestParamInfo<TraceCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hetpar::test
