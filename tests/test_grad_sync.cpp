// The gradients' sum over data-parallel replicas on 2 and 4 real Gloo ranks,
// against the sum computed locally: gradients shared into buckets with
// others, one alone in its bucket (summed in place), one not contiguous, and
// one this rank never produced (every replica must send the same layout).
#include <ATen/ATen.h>

#include "model/param_init.hpp"
#include "tests/dist_harness.hpp"
#include "train/grad_sync.hpp"

namespace hetpar::test {
namespace {

// Rank r's gradient of parameter i: a value every rank can compute.
at::Tensor grad_of(int rank, size_t i, at::IntArrayRef shape) {
  return init_normal(100 + rank, "grad" + std::to_string(i), shape, 1.0);
}

HETPAR_WORKER(grad_sync_sums_every_gradient) {
  Group& dp = rt.world();
  // Bucket of 64 bytes (16 floats): the 3x4 and 2x2 share one, the 8x8 is
  // alone, the 5x3 is transposed (not contiguous), the last has no gradient
  // on rank 0.
  const std::vector<std::vector<int64_t>> shapes = {{3, 4}, {2, 2}, {8, 8}, {5, 3}, {7}};
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor p = at::zeros(shapes[i]).set_requires_grad(true);
    if (i == 3) {
      p.mutable_grad() = grad_of(rt.rank(), i, {shapes[i][1], shapes[i][0]}).t();
    } else if (!(i == 4 && rt.rank() == 0)) {
      p.mutable_grad() = grad_of(rt.rank(), i, shapes[i]);
    }
    params.push_back(p);
  }
  const void* alone = params[2].grad().data_ptr();
  all_reduce_gradients(params, dp, /*bucket_bytes=*/64);
  require(params[2].grad().data_ptr() == alone, "the gradient alone in its bucket moved");
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor expected = at::zeros(shapes[i]);
    for (int r = 0; r < dp.size(); ++r) {
      if (i == 4 && r == 0) continue;
      expected += i == 3 ? grad_of(r, i, {shapes[i][1], shapes[i][0]}).t() : grad_of(r, i, shapes[i]);
    }
    // Sums of the same values in another order: fp32 rounding.
    require(at::allclose(params[i].grad(), expected, 1e-6, 1e-6), "gradient {} is not the sum over ranks", i);
  }
}

class GradSync : public ::testing::TestWithParam<int> {};

TEST_P(GradSync, SumsEveryGradientOverTheReplicas) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("grad_sync_sums_every_gradient", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GradSync, ::testing::Values(2, 4));

}  // namespace
}  // namespace hetpar::test
