// A step run forward only (evaluation) against the same step run in full, on
// real ranks under each kind of schedule: the same loss (in fp32, to 1e-6),
// no gradient made anywhere, and less tensor memory at its peak on every
// rank (no activations kept for a backward).
#include <ATen/ATen.h>

#include <sstream>

#include "data/synthetic_data.hpp"
#include "metrics/cpu_tensor_memory.hpp"
#include "tests/dist_harness.hpp"
#include "train/forward_only_loss.hpp"
#include "train/job_setup.hpp"
#include "train/step_schedule.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

HETPAR_WORKER(forward_only_step) {
  std::vector<std::string> sets;
  std::istringstream words(std::getenv("TEST_SETS"));
  for (std::string set; words >> set;) sets.push_back(set);
  const RunConfig config = load_run_config(source_tree_path("/workloads/tiny.toml"), sets);
  require(install_cpu_tensor_counter(), "the CPU tensor counter is not installed");
  JobGroups groups(rt, config.placement);
  const std::unique_ptr<MultimodalModel> model = rank_model(config, groups, at::kCPU);
  const SyntheticData data(config.encoder, config.llm, config.data, static_cast<uint64_t>(config.run.seed));

  const double before = static_cast<double>(cpu_tensor_bytes_in_use());
  reset_cpu_tensor_peak();
  const double forward_only = forward_only_loss(*model, data, config, groups, rt.world(), /*batches=*/1).loss;
  const double forward_only_peak = static_cast<double>(cpu_tensor_peak_bytes()) - before;
  for (const at::Tensor& p : model->trainable_parameters()) require(!p.grad().defined(), "forward only made a gradient");

  reset_cpu_tensor_peak();
  PhaseTimer timer;
  constexpr int64_t kStep = 1;
  const StepContext full{*model, data, config, groups, rt.world(), timer, kStep, micro_batches_per_step(config),
                         static_cast<double>(data.target_tokens(kStep))};
  at::Tensor loss = run_micro_batches(full).to(at::kDouble).reshape({1}).clone();
  const double full_peak = static_cast<double>(cpu_tensor_peak_bytes()) - before;
  rt.world().all_reduce(loss);
  bool any_gradient = false;
  for (const at::Tensor& p : model->trainable_parameters()) any_gradient = any_gradient || p.grad().defined();

  std::printf("rank %d: loss %.9g forward only, %.9g in full; tensor peak %.2f MiB forward only, %.2f MiB in full\n",
              rt.rank(), forward_only, loss.item<double>(), forward_only_peak / (1 << 20), full_peak / (1 << 20));
  require(std::abs(forward_only - loss.item<double>()) <= 1e-6 * std::abs(loss.item<double>()),
          "forward only {} vs the full step's {}", forward_only, loss.item<double>());
  require(any_gradient || model->trainable_parameters().empty(), "the full step made no gradient");
  require(forward_only_peak < full_peak, "forward only peaked at {} bytes, the full step at {}", forward_only_peak,
          full_peak);
}

struct ForwardOnlyCase {
  const char* name;
  const char* sets;
  int world;
};
void PrintTo(const ForwardOnlyCase& c, std::ostream* os) { *os << c.name; }

class ForwardOnly : public ::testing::TestWithParam<ForwardOnlyCase> {};

TEST_P(ForwardOnly, SameLossAsTheFullStepNoGradientsLessMemory) {
  WorkerOptions options;
  options.env = {{"TEST_SETS", std::string("data.global_batch_size=4 data.micro_batch_size=1 ") + GetParam().sets}};
  EXPECT_TRUE(all_ranks_succeeded(run_workers("forward_only_step", GetParam().world, options)));
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ForwardOnly,
    ::testing::Values(
        ForwardOnlyCase{"uniform_tp2_cp2", "layout.llm.tp=2 layout.llm.cp=2", 4},
        ForwardOnlyCase{"uniform_pp2", "layout.llm.pp=2", 2},
        ForwardOnlyCase{"colocated_enc_dp2_llm_tp2", "layout.placement=colocated layout.encoder.dp=2 layout.llm.tp=2", 2},
        ForwardOnlyCase{"colocated_enc_dp2_llm_pp2", "layout.placement=colocated layout.encoder.dp=2 layout.llm.pp=2", 2},
        ForwardOnlyCase{"noncolocated_dp2_to_1", "layout.placement=non-colocated layout.encoder.dp=2", 3},
        ForwardOnlyCase{"noncolocated_enc_pp2_to_pp2", "layout.placement=non-colocated layout.encoder.pp=2 layout.llm.pp=2", 4}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hetpar::test
