// The memory model against real CPU runs of tiny.toml made larger, two ways:
// - against the tensor peak (the counting allocator's,
//   metrics/cpu_tensor_memory.hpp: what a GPU's caching allocator reports),
//   with no reserved part: state, activations and the loss's logits alone,
//   on every kind of rank of one rank, a pipeline, colocated and
//   non-colocated, TP (also sequence parallel), CP and an activation-heavy
//   shape, in fp32 and bf16, and what sequence parallelism saves;
// - against the peak resident memory: the reserved part taken from the
//   smallest run (the runtime alone, in effect), the model must then predict
//   larger runs' fullest rank within kRssBound.
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "config/run_config.hpp"
#include "dist/backend_factory.hpp"
#include "model/attention.hpp"
#include "model/norms.hpp"
#include "plan/memory_model.hpp"
#include "tests/dist_harness.hpp"
#include "tests/test_paths.hpp"

namespace hetpar::test {
namespace {

// Every kind of rank (parallel/rank_parts.hpp) is checked against its own
// measured peak, not only the fullest. Measured 2026-12-07 on a CPU with
// bf16 units (avx512_bf16): fp32 -1.6 % to +0.0 % on every kind of rank;
// bf16 -0.5 % to +2.4 %, the activation-heavy cases over (on a CPU without
// bf16 units the day before they read -0.9 % to +0.4 %: the library's bf16
// kernels hold less here). Before this change the pipeline's first stage
// read -18 % recomputing (its peak is in the last backward, with every
// gradient made) and the non-colocated encoder rank -5 % to -16 % (its
// rows held for the boundary). Left uncounted: small tensors (a row's
// statistics, masks, the targets), 1 to 2 MiB.
constexpr double kTensorBound = 0.03;

// Measured peak resident memory runs 9-11% above the model in these runs
// (2026-12-05), while the model is within 0.7% of the same runs' tensor peak:
// the gap is the allocator's own slack (the C library's heap keeps freed
// activations once its mmap threshold has risen: docs/design.md, "Memory
// model") and the runtime's buffers beyond the smallest run's.
constexpr double kRssBound = 0.15;

const std::string kTiny = source_tree_path("/workloads/tiny.toml");

const std::vector<std::string> kLarger = {
    "llm.hidden=512",   "llm.heads=8",    "llm.kv_heads=4",           "llm.ffn_hidden=1536",
    "llm.vocab_size=16000", "llm.seq_len=256", "data.micro_batch_size=4", "data.global_batch_size=8",
    "llm.layers=4"};

// The largest `field` (MiB in steps.jsonl) over `steps` steps of tiny.toml
// with `sets`, in bytes, and the largest tensor peak of each part of the
// ranks (parallel/rank_parts.hpp).
struct MeasuredPeaks {
  double peak = 0;
  std::map<std::string, double> tensor_by_part;
};
MeasuredPeaks measured_peaks(const std::string& tag, const std::vector<std::string>& sets, const char* field, int steps) {
  const std::string dir = ::testing::TempDir() + "/memory_" + tag + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::string command =
      hetpar_binary() + " train " + kTiny + " --set run.steps=" + std::to_string(steps) + " --out " + dir;
  for (const std::string& s : sets) command += " --set '" + s + "'";
  const auto [code, out] = run_command(command);
  EXPECT_EQ(code, 0) << out;
  std::ifstream file(dir + "/steps.jsonl");
  MeasuredPeaks measured;
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json step = nlohmann::json::parse(line);
    measured.peak = std::max(measured.peak, step[field].get<double>() * (1 << 20));
    const nlohmann::json by_part = step.value("peak_tensor_mib_by_part", nlohmann::json::object());
    for (const auto& [what, mib] : by_part.items()) {
      double& peak = measured.tensor_by_part[what];
      peak = std::max(peak, mib.get<double>() * (1 << 20));
    }
  }
  std::filesystem::remove_all(dir);
  return measured;
}
double measured_peak(const std::string& tag, const std::vector<std::string>& sets, const char* field, int steps) {
  return measured_peaks(tag, sets, field, steps).peak;
}

// What calibrate says of this machine's CPU and Gloo, `element_bytes` an activation value.
MemoryAssumptions cpu_assumptions(double element_bytes) {
  MemoryAssumptions a;
  a.element_bytes = element_bytes;
  a.attention_keeps_probabilities = grouped_query_attention_keeps_probabilities(at::kCPU);
  a.norm_backward_unfused = rms_norm_backward_is_unfused(at::kCPU);
  a.reduce_scatter_copies_input = reduce_scatter_copies_input("gloo");
  return a;
}

void print_comparison(const std::string& name, double measured, const RankMemory& predicted, double error) {
  std::printf("%s: measured %.1f MiB, predicted %.1f MiB (%s: state %.1f, activations %.1f, transient %.1f, "
              "unmade gradients %.1f, reserved %.1f), error %+.1f%%\n",
              name.c_str(), measured / (1 << 20), predicted.total() / (1 << 20), predicted.what.c_str(),
              predicted.state / (1 << 20), predicted.activations / (1 << 20), predicted.transient / (1 << 20),
              predicted.unmade_gradients / (1 << 20), predicted.reserved / (1 << 20), 100 * error);
}

struct MemoryCase {
  const char* name;
  std::vector<std::string> sets;
};
void PrintTo(const MemoryCase& c, std::ostream* out) { *out << c.name; }

// The activation-heavy shape: a small vocabulary, twice the tokens a
// micro-batch and every sample at three images, so that the saved
// activations are most of the peak.
const std::vector<std::string> kActivationHeavy = {"llm.vocab_size=512", "data.micro_batch_size=8",
                                                   "data.images_min=3", "encoder.hidden=256",
                                                   "encoder.mlp_hidden=1024"};

// The activation-heavy shape with `sets`.
std::vector<std::string> activation_heavy(const std::vector<std::string>& sets) {
  std::vector<std::string> all = kActivationHeavy;
  all.insert(all.end(), sets.begin(), sets.end());
  return all;
}

const MemoryCase kCases[] = {
    {"one_rank", {}},
    {"llm_pp2", {"layout.llm.pp=2"}},
    // Every sample at its most images, as the model counts the encoder's rank.
    {"non_colocated", {"layout.placement=\"non-colocated\"", "layout.encoder.dp=1", "data.images_min=3"}},
    {"non_colocated_run_ahead1",
     {"layout.placement=\"non-colocated\"", "layout.encoder.dp=1", "data.images_min=3", "layout.run_ahead=1"}},
    // An encoder as wide as the LLM, 768 patches a micro-batch: its own rank's peak is the encoder's layers'.
    {"non_colocated_encoder_heavy",
     {"layout.placement=\"non-colocated\"", "layout.encoder.dp=1", "data.images_min=3", "encoder.hidden=512",
      "encoder.heads=8", "encoder.mlp_hidden=2048", "encoder.layers=4", "encoder.image_size=64"}},
    {"colocated_pp2", {"layout.placement=\"colocated\"", "layout.llm.pp=2", "layout.encoder.dp=2", "data.images_min=3"}},
    {"tp2", {"layout.llm.tp=2"}},
    {"cp2", {"layout.llm.cp=2"}},
    {"dp2", {"layout.llm.dp=2", "data.global_batch_size=16"}},
    {"dp2_sharded", {"layout.llm.dp=2", "data.global_batch_size=16", "optim.shard_state=true"}},
    {"activations", activation_heavy({"data.global_batch_size=16"})},
    {"recompute", {"run.recompute=\"full\""}},
    {"activations_recompute", activation_heavy({"data.global_batch_size=16", "run.recompute=\"full\""})},
    {"activations_recompute_first",
     activation_heavy({"data.global_batch_size=16", "run.recompute=\"full\"", "run.recompute_layers=1"})},
    {"activations_recompute_llm",
     activation_heavy({"data.global_batch_size=16", "run.recompute=\"full\"", "run.recompute_modules=\"llm\""})},
    {"activations_recompute_encoder",
     activation_heavy({"data.global_batch_size=16", "run.recompute=\"full\"", "run.recompute_modules=\"encoder\""})},
    {"llm_pp2_recompute", {"layout.llm.pp=2", "run.recompute=\"full\""}},
    {"activations_dp2_recompute",
     activation_heavy({"data.global_batch_size=32", "layout.llm.dp=2", "run.recompute=\"full\""})},
    {"tp2_sp", {"layout.llm.tp=2", "layout.llm.sp=true"}},
    {"activations_tp2_sp", activation_heavy({"data.global_batch_size=16", "layout.llm.tp=2", "layout.llm.sp=true"})},
    {"activations_tp2", activation_heavy({"data.global_batch_size=16", "layout.llm.tp=2"})},
    {"activations_ffn3072", activation_heavy({"data.global_batch_size=16", "llm.ffn_hidden=3072"})},
    // One micro-batch a step: every forward before the first backward, so no gradient yet at the peak.
    {"one_micro_batch", {"data.global_batch_size=4"}},
    {"activations_one_micro_batch", activation_heavy({"data.global_batch_size=8"})},
    {"dp2_sharded_one_micro_batch", {"layout.llm.dp=2", "data.global_batch_size=8", "optim.shard_state=true"}}};

// One case in one precision a test: each its own process and time limit
// (bf16 matmuls run at a fifth of fp32's rate on a CPU without bf16 units).
// Two steps: the tensor peak comes in the first, the optimizer's moments in
// the second's; a third step repeats the second (within 0.1 %).
class TensorPeak : public ::testing::TestWithParam<std::tuple<MemoryCase, const char*>> {};

TEST_P(TensorPeak, IsPredictedWithinTheBoundOnEveryKindOfRank) {
  const auto& [memory_case, precision] = GetParam();
  const bool residual16 = std::string(precision) == "bf16_residual";
  const MemoryAssumptions cpu = cpu_assumptions(std::string(precision) == "fp32" ? 4.0 : 2.0);
  std::vector<std::string> sets = kLarger;
  sets.insert(sets.end(), memory_case.sets.begin(), memory_case.sets.end());
  sets.push_back(std::string("run.precision=\"") + (residual16 ? "bf16" : precision) + "\"");
  if (residual16) sets.push_back("run.fp32_residual=false");
  const RunConfig config = load_run_config(kTiny, sets);
  const std::vector<RankMemory> predicted = rank_memory(config, cpu);
  const std::string name = std::string(memory_case.name) + "_" + precision;
  const MeasuredPeaks measured = measured_peaks(name, sets, "peak_tensor_mib", 2);
  ASSERT_EQ(measured.tensor_by_part.size(), predicted.size()) << name;
  for (const RankMemory& part : predicted) {
    const auto it = measured.tensor_by_part.find(part.what);
    ASSERT_NE(it, measured.tensor_by_part.end()) << name << ": no measured peak for " << part.what;
    const double error = part.total() / it->second - 1;
    print_comparison(name, it->second, part, error);
    EXPECT_LE(std::abs(error), kTensorBound) << name << ", " << part.what;
  }
}

INSTANTIATE_TEST_SUITE_P(MemoryModel, TensorPeak,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values("fp32", "bf16")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param);
                         });

// A bf16 residual stream (run.fp32_residual = false): its norms' inputs, the
// recomputed layers' inputs, the residual's gradient and what stages pass on
// at 2 bytes a value. The kinds of rank whose peaks those parts make: the
// layers' (activations, the encoder's), recompute's, the pipeline's, the
// final norm's backward under sequence parallelism, and one micro-batch a step.
std::vector<MemoryCase> residual_cases() {
  std::vector<MemoryCase> out;
  for (const char* name : {"one_rank", "llm_pp2", "non_colocated_encoder_heavy", "colocated_pp2", "activations",
                           "activations_recompute", "llm_pp2_recompute", "activations_tp2_sp",
                           "activations_one_micro_batch"}) {
    const auto it = std::find_if(std::begin(kCases), std::end(kCases),
                                 [&](const MemoryCase& c) { return std::string(c.name) == name; });
    if (it == std::end(kCases)) throw std::logic_error(std::string("no memory case ") + name);
    out.push_back(*it);
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(MemoryModelBf16Residual, TensorPeak,
                         ::testing::Combine(::testing::ValuesIn(residual_cases()), ::testing::Values("bf16_residual")),
                         [](const auto& info) { return std::string(std::get<0>(info.param).name) + "_bf16_residual"; });

// What sequence parallelism saves, measured as the difference of two tensor
// peaks (TP 2 with and without it, the activation-heavy shape, fp32), against
// the model's difference: a sharper test of the split than either peak's
// bound, since the rest of both peaks is the same. 29.0 and 31.0 MiB
// measured, 31.5 predicted (2026-12-07; 36.0 before the backward's
// transients were counted: the head's backward under SP gathers its input
// again, and without SP the CPU's norm backward sets the peak); each peak
// moves by 2 MiB from run to run. 25 %: a model that left SP out (no saving)
// or counted it twice fails.
TEST(MemoryModel, SequenceParallelSavesWhatTheModelCounts) {
  const MemoryAssumptions cpu = cpu_assumptions(4.0);
  const std::vector<std::string> tp2 = activation_heavy({"data.global_batch_size=16", "layout.llm.tp=2"});
  std::vector<std::string> sp = tp2;
  sp.push_back("layout.llm.sp=true");
  std::vector<std::string> with_larger[2] = {kLarger, kLarger};
  with_larger[0].insert(with_larger[0].end(), tp2.begin(), tp2.end());
  with_larger[1].insert(with_larger[1].end(), sp.begin(), sp.end());
  const double predicted = fullest_rank(rank_memory(load_run_config(kTiny, with_larger[0]), cpu)).total() -
                           fullest_rank(rank_memory(load_run_config(kTiny, with_larger[1]), cpu)).total();
  const double measured = measured_peak("saving_tp2", with_larger[0], "peak_tensor_mib", 2) -
                          measured_peak("saving_tp2_sp", with_larger[1], "peak_tensor_mib", 2);
  std::printf("sequence parallelism at tp 2 saves %.1f MiB measured, %.1f MiB predicted\n", measured / (1 << 20),
              predicted / (1 << 20));
  ASSERT_GT(predicted, 0);
  EXPECT_NEAR(measured / predicted, 1.0, 0.25);
}

TEST(MemoryModel, PredictsThePeakResidentMemoryOfRealRuns) {
  MemoryAssumptions cpu = cpu_assumptions(4.0);  // fp32
  const RunConfig smallest = load_run_config(kTiny, {});
  cpu.reserved_bytes = measured_peak("smallest", {}, "peak_memory_mib", 3) - fullest_rank(rank_memory(smallest, cpu)).total();
  ASSERT_GT(cpu.reserved_bytes, 0);
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {"one_rank", {}},
      {"llm_pp2", {"layout.llm.pp=2"}},
      {"non_colocated", {"layout.placement=\"non-colocated\"", "layout.encoder.dp=1"}}};
  for (const auto& [name, extra] : cases) {
    std::vector<std::string> sets = kLarger;
    sets.insert(sets.end(), extra.begin(), extra.end());
    const RunConfig config = load_run_config(kTiny, sets);
    const RankMemory predicted = fullest_rank(rank_memory(config, cpu));
    const double measured = measured_peak(name, sets, "peak_memory_mib", 3);
    const double error = predicted.total() / measured - 1;
    print_comparison(name, measured, predicted, error);
    EXPECT_LE(std::abs(error), kRssBound) << name;
    // The model's own part dominates: a model that left out activations or logits would miss the bound.
    EXPECT_GT(predicted.total() - predicted.reserved, 0.4 * measured) << name;
  }
}

}  // namespace
}  // namespace hetpar::test
