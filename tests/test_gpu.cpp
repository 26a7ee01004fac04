// What only a GPU can check, on one GPU: device selection and metadata, a
// real NCCL communicator and a sub-group split from it, out-of-memory recovery, the caching allocator's
// peak, CUDA-event phase times, the bounded end-of-step wait and a step
// without hidden host syncs, the gradient-landing hooks the data-parallel
// reduction starts its buckets from, the weight-gradient GEMM that adds
// into the fp32 .grad, and the norms of a bf16 residual stream. Labelled `gpu`; each case skips, saying why,
// where no CUDA device is visible (scripts/gpu-check.sh runs them on a GPU).
#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <chrono>

#include "config/device_choice.hpp"
#include "dist/backend_factory.hpp"
#include "dist/device.hpp"
#include "dist/group.hpp"
#include "metrics/phase_timer.hpp"
#include "tp/weight_cast.hpp"
#include "tp/weight_grad.hpp"
#include "model/autocast_scope.hpp"
#include "train/sequence_part.hpp"
#include "tests/norm_checks.hpp"

namespace hetpar {
namespace {

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (visible_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device visible: this case needs a GPU";
    RunConfig config;
    config.runtime.device = "cuda";
    resolve_device(config, visible_cuda_devices());
    device_ = select_device(config, LaunchEnv{});
  }
  at::Device device_{at::kCPU};
};

TEST_F(Gpu, SelectsTheLocalRanksDeviceAndDescribesIt) {
  EXPECT_EQ(device_, at::Device(at::kCUDA, 0));
  EXPECT_EQ(c10::cuda::current_device(), 0);
  const nlohmann::json meta = device_metadata(device_);
  for (const char* key : {"device", "cuda_driver", "cuda_runtime", "nccl_version", "device_memory_mib", "tf32_matmul"}) {
    EXPECT_TRUE(meta.contains(key)) << key;
  }
  EXPECT_FALSE(meta["tf32_matmul"].get<bool>()) << "fp32 runs keep TF32 off unless runtime.tf32 says so";
  std::printf("device metadata: %s\n", meta.dump().c_str());
}

// One rank's real NCCL communicator, bound and connected eagerly: all-reduce,
// all-to-all-v and a coalesced send/receive pair to itself.
TEST_F(Gpu, NcclCommunicatorOfOneRank) {
  c10d::TCPStoreOptions so;
  so.isServer = true;
  so.numWorkers = 1;
  so.port = 0;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto nccl = make_nccl_backend(store, {0}, 0, std::chrono::seconds(30), device_);
  const auto on = at::TensorOptions(at::kFloat).device(device_);

  std::vector<at::Tensor> t{at::arange(8, on)};
  nccl->allreduce(t)->wait();
  EXPECT_TRUE(at::equal(t[0].cpu(), at::arange(8, at::kFloat)));

  at::Tensor in = at::arange(15, on).reshape({5, 3}), out = at::empty({5, 3}, on);
  std::vector<int64_t> splits{5};
  nccl->alltoall_base(out, in, splits, splits)->wait();
  EXPECT_TRUE(at::equal(out.cpu(), in.cpu()));

  std::vector<at::Tensor> send{at::full({4}, 7.0, on)}, recv{at::zeros({4}, on)};
  nccl->startCoalescing();
  nccl->send(send, 0, 0);
  nccl->recv(recv, 0, 0);
  nccl->endCoalescing()->wait();
  EXPECT_TRUE(at::equal(recv[0].cpu(), at::full({4}, 7.0)));
  nccl->shutdown();
}

// A sub-group split from the world's communicator (what Runtime does for every
// NCCL sub-group): all-reduce and a coalesced send/receive on the child, then
// both shut down in creation order, as Runtime does.
TEST_F(Gpu, NcclSubGroupSplitFromTheWorld) {
  c10d::TCPStoreOptions so;
  so.isServer = true;
  so.numWorkers = 1;
  so.port = 0;
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto world = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("group0", store), {0}, 0,
                                 std::chrono::seconds(30), device_);
  auto child = split_nccl_backend(world, c10::make_intrusive<c10d::PrefixStore>("group1", store), {0},
                                  std::chrono::seconds(30));
  ASSERT_TRUE(child) << "a member of the split got no communicator";
  EXPECT_EQ(child->getSize(), 1);
  const auto on = at::TensorOptions(at::kFloat).device(device_);
  std::vector<at::Tensor> t{at::full({6}, 3.0, on)};
  child->allreduce(t)->wait();
  EXPECT_TRUE(at::equal(t[0].cpu(), at::full({6}, 3.0)));
  std::vector<at::Tensor> send{at::arange(5, on)}, recv{at::zeros({5}, on)};
  child->startCoalescing();
  child->send(send, 0, 0);
  child->recv(recv, 0, 0);
  child->endCoalescing()->wait();
  EXPECT_TRUE(at::equal(recv[0].cpu(), at::arange(5, at::kFloat)));
  world->shutdown();
  child->shutdown();
}

TEST_F(Gpu, OutOfMemoryIsCaughtAndTheNextStepRuns) {
  const double total = device_metadata(device_)["device_memory_mib"].get<double>() * (1 << 20);
  bool caught = false;
  try {
    at::Tensor huge = at::empty({static_cast<int64_t>(2 * total)}, at::TensorOptions(at::kByte).device(device_));
  } catch (const c10::OutOfMemoryError&) {
    caught = true;
  }
  EXPECT_TRUE(caught) << "allocating twice the device's memory did not fail as out of memory";
  at::Tensor w = at::randn({256, 256}, at::TensorOptions(at::kFloat).device(device_)).requires_grad_(true);
  at::mm(w, w).sum().backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(std::isfinite(w.grad().sum().item<double>()));
}

TEST_F(Gpu, PeakMemoryComesFromTheAllocatorAndResets) {
  reset_peak_memory(device_);
  const double before = peak_memory_bytes(device_);
  {
    at::Tensor block = at::empty({256 << 20}, at::TensorOptions(at::kByte).device(device_));
    EXPECT_GE(peak_memory_bytes(device_), before + (256 << 20));
  }
  reset_peak_memory(device_);
  EXPECT_LT(peak_memory_bytes(device_), before + (256 << 20));
}

// Events on the stream time the device's work, which a host clock around
// a synchronised region sees too: the two agree when the device is busy.
TEST_F(Gpu, PhaseTimesFromEventsMatchTheWallTime) {
  PhaseTimer timer(device_);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions(at::kFloat).device(device_));
  at::Tensor c = at::mm(a, a);
  c10::cuda::device_synchronize();
  const auto start = std::chrono::steady_clock::now();
  {
    auto timed = timer.measure(Phase::kLlmForward);
    for (int i = 0; i < 50; ++i) at::mm_out(c, a, a);
  }
  wait_for_device(device_, std::chrono::seconds(60));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double phase = timer.take()[static_cast<int>(Phase::kLlmForward)];
  std::printf("50 matmuls: %.4f s by events, %.4f s by the host clock\n", phase, wall);
  EXPECT_GT(phase, 0.0);
  EXPECT_NEAR(phase, wall, 0.1 * wall);
  EXPECT_EQ(timer.take()[static_cast<int>(Phase::kLlmForward)], 0.0);  // take() empties
}

TEST_F(Gpu, WaitForDeviceEndsAQueueThatDoesNotDrain) {
  at::cuda::sleep(4'000'000'000LL);  // ~2 s at 2 GHz: a stand-in for a collective waiting on a dead peer
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(wait_for_device(device_, std::chrono::milliseconds(200)), CollectiveError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  wait_for_device(device_, std::chrono::seconds(60));  // it drains in the end
}

TEST_F(Gpu, HostSyncCheckCatchesAReadOfAValue) {
  setenv("HETPAR_CHECK_HOST_SYNCS", "1", 1);
  const at::Tensor x = at::ones({4}, at::TensorOptions(at::kFloat).device(device_));
  {
    HostSyncCheck check(device_);
    at::Tensor y = x * 2;  // queued: no sync
    EXPECT_THROW(y.sum().item<float>(), c10::Error);
  }
  EXPECT_EQ(x.sum().item<float>(), 4.0f);  // allowed again after the scope
  unsetenv("HETPAR_CHECK_HOST_SYNCS");
}

// Context parallelism's share of a micro-batch's image rows is picked by
// host-side indices: no read of the device's mask inside a step.
TEST_F(Gpu, ContextParallelImageRowsNeedNoHostSync) {
  setenv("HETPAR_CHECK_HOST_SYNCS", "1", 1);
  at::Tensor mask = at::zeros({2, 16}, at::kBool);
  mask[0].narrow(0, 2, 5).fill_(true);
  mask[1].narrow(0, 9, 6).fill_(true);
  const int64_t count = mask.sum().item<int64_t>();
  const at::Tensor rows = at::arange(count, at::TensorOptions(at::kFloat).device(device_)).unsqueeze(1);
  at::Tensor mine;
  {
    HostSyncCheck check(device_);
    mine = image_rows_of_part(rows, mask, /*cp_rank=*/1, /*cp_size=*/2);
  }
  unsetenv("HETPAR_CHECK_HOST_SYNCS");
  // Rank 1 of 2 holds chunks 1 and 2 of 4 (positions 4-11): rows 2-4 of sample 0, rows 5-7 of sample 1.
  EXPECT_TRUE(at::equal(mine.squeeze(1).cpu(), at::tensor({2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f})));
}

// The data-parallel reduction (train/grad_reducer.hpp) learns that a
// gradient has landed from its parameter's post-accumulation hook, which on a
// GPU the autograd engine calls on its own device thread. Each trainable
// weight's hook fires once a backward, in fp32 and in bf16 through the
// step's weight copies (whose node adds into .grad itself), there too.
TEST_F(Gpu, GradientLandingHooksFireOnceABackward) {
  struct Count : torch::autograd::PostAccumulateGradHook {
    explicit Count(std::atomic<int>* n) : n(n) {}
    void operator()(const torch::autograd::Variable&) override { ++*n; }
    std::atomic<int>* n;
  };
  const auto on = at::TensorOptions(at::kFloat).device(device_);
  at::Tensor w1 = (at::randn({64, 64}, on) * 0.1).set_requires_grad(true);
  at::Tensor w2 = (at::randn({64, 64}, on) * 0.1).set_requires_grad(true);
  std::atomic<int> landed1{0}, landed2{0};
  torch::autograd::impl::set_post_acc_grad_hooks(w1, std::make_unique<Count>(&landed1));
  torch::autograd::impl::set_post_acc_grad_hooks(w2, std::make_unique<Count>(&landed2));
  const at::Tensor x = at::randn({8, 64}, on);
  for (const bool bf16 : {false, true}) {
    const StepCastCache casts(bf16);
    for (int micro = 0; micro < 2; ++micro) {
      at::Tensor loss;
      {
        const AutocastScope autocast(bf16);
        loss = at::matmul(at::matmul(x, compute_weight(w1, x).t()), compute_weight(w2, x).t()).to(at::kFloat).square().sum();
      }
      loss.backward();
    }
  }
  c10::cuda::device_synchronize();
  EXPECT_EQ(landed1.load(), 4) << "w1: 2 micro-batches in fp32, 2 in bf16";
  EXPECT_EQ(landed2.load(), 4) << "w2: 2 micro-batches in fp32, 2 in bf16";
  for (const at::Tensor& w : {w1, w2}) torch::autograd::impl::set_post_acc_grad_hooks(w, nullptr);
}

// The weight-gradient path this device and LibTorch take (tp/weight_grad.hpp),
// printed, and either way two micro-batches of a concatenated copy's weight
// gradients against the fp32 products of the same bf16 values: within fp32's
// rounding (1e-5 of the largest value) where the GEMM adds into the fp32
// .grad, within bf16's (1e-2) where it cannot.
TEST_F(Gpu, ACopysWeightGradientsGoIntoTheFp32Grad) {
  const bool in_fp32 = gemm_adds_into_fp32(device_);
  RecordProperty("gemm_adds_into_fp32", in_fp32 ? "true" : "false");
  std::printf("the GEMM adds weight gradients into the fp32 .grad: %s\n", in_fp32 ? "yes" : "no (bf16 product, then added)");
  const auto on = at::TensorOptions(at::kFloat).device(device_);
  at::manual_seed(3);
  at::Tensor a = (at::randn({96, 64}, on) * 0.1).set_requires_grad(true);
  at::Tensor b = (at::randn({32, 64}, on) * 0.1).set_requires_grad(true);
  at::Tensor want_a = at::zeros_like(a), want_b = at::zeros_like(b);
  {
    const StepCastCache casts(true);
    for (int micro = 0; micro < 2; ++micro) {
      const at::Tensor x = at::randn({2, 128, 64}, on), r = at::randn({2, 128, 128}, on);
      at::Tensor y;
      {
        const AutocastScope autocast(true);
        const std::optional<GemmWeight> w = fused_gemm_weight({a, b}, x);
        ASSERT_TRUE(w.has_value());
        y = gemm_linear(x, *w);
      }
      (y.to(at::kFloat) * r).sum().backward();
      // The GEMM's operands: the output's gradient and the input, both in bf16.
      const at::Tensor g = r.to(at::kBFloat16).to(at::kFloat).reshape({-1, 128});
      const at::Tensor in = x.to(at::kBFloat16).to(at::kFloat).reshape({-1, 64});
      want_a += g.narrow(1, 0, 96).t().mm(in);
      want_b += g.narrow(1, 96, 32).t().mm(in);
    }
  }
  const double tolerance = in_fp32 ? 1e-5 : 1e-2;
  for (const auto& [got, want] : {std::pair{a.grad(), want_a}, std::pair{b.grad(), want_b}}) {
    ASSERT_TRUE(got.defined());
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    const double error = (got - want).abs().max().item<double>() / want.abs().max().item<double>();
    EXPECT_LE(error, tolerance);
    std::printf("weight gradient: largest error %.3g of the largest value\n", error);
  }
}

// The fused RMSNorm and the layer norm with a bf16 input (tests/norm_checks.hpp).
TEST_F(Gpu, ABf16ResidualStreamsNormsStayBf16) { test::expect_bf16_norms_match_fp32(device_); }

}  // namespace
}  // namespace hetpar
