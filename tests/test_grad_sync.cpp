// The gradients' sum over data-parallel replicas on 2, 3 and 4 real Gloo ranks,
// against the sum computed locally: gradients shared into buckets with
// others, one alone in its bucket (summed in place), one not contiguous, and
// one this rank never produced (every replica must send the same layout).
// And the reducer that starts buckets during the step's last backward
// (train/grad_reducer.hpp) on a real autograd graph: when they start, that
// the sums are those of a reduction after the backward to the bit, and that a
// gradient landing after its bucket started is an error. And the sharded
// reduction (optim.shard_state): reduce-scattered segments and the gather.
#include <ATen/ATen.h>

#include "model/param_init.hpp"
#include "tests/dist_harness.hpp"
#include "train/grad_reducer.hpp"

namespace hetpar::test {
namespace {

// Rank r's gradient of parameter i: a value every rank can compute.
at::Tensor grad_of(int rank, size_t i, at::IntArrayRef shape) {
  return init_normal(100 + rank, "grad" + std::to_string(i), shape, 1.0);
}

// Five parameters for buckets of 64 bytes (16 floats): the 3x4 and 2x2
// share one, the 8x8 is alone, the 5x3's gradient is transposed (not
// contiguous), the last has no gradient on rank 0.
const std::vector<std::vector<int64_t>> kShapes = {{3, 4}, {2, 2}, {8, 8}, {5, 3}, {7}};

at::Tensor rank_grad(int rank, size_t i) {
  const auto& shape = kShapes[i];
  return i == 3 ? grad_of(rank, i, {shape[1], shape[0]}).t() : grad_of(rank, i, shape);
}

std::vector<at::Tensor> params_with_grads(int rank) {
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    at::Tensor p = at::zeros(kShapes[i]).set_requires_grad(true);
    if (!(i == 4 && rank == 0)) p.mutable_grad() = rank_grad(rank, i);
    params.push_back(p);
  }
  return params;
}

// Parameter i's gradient summed over `ranks`, computed here.
at::Tensor expected_sum(size_t i, int ranks) {
  at::Tensor sum = at::zeros(kShapes[i]);
  for (int r = 0; r < ranks; ++r) {
    if (!(i == 4 && r == 0)) sum += rank_grad(r, i);
  }
  return sum;
}

HETPAR_WORKER(grad_sync_sums_every_gradient) {
  Group& dp = rt.world();
  std::vector<at::Tensor> params = params_with_grads(rt.rank());
  const void* alone = params[2].grad().data_ptr();
  GradReducer after_backward(params, dp, /*bucket_bytes=*/64, /*overlap=*/false);
  after_backward.begin_step();
  after_backward.finish();
  require(params[2].grad().data_ptr() == alone, "the gradient alone in its bucket moved");
  for (size_t i = 0; i < kShapes.size(); ++i) {
    // Sums of the same values in another order: fp32 rounding.
    require(at::allclose(params[i].grad(), expected_sum(i, dp.size()), 1e-6, 1e-6), "gradient {} is not the sum over ranks", i);
  }
}

class GradSync : public ::testing::TestWithParam<int> {};

TEST_P(GradSync, SumsEveryGradientOverTheReplicas) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("grad_sync_sums_every_gradient", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GradSync, ::testing::Values(2, 4));

}  // namespace
}  // namespace hetpar::test

namespace hetpar::test {
namespace {

// A chain of square weights, 8x8 floats (256 bytes) each, the input the
// rank's own: out = x W0 W1 ... W5, loss = sum(out * out).
struct Chain {
  std::vector<at::Tensor> weights;
  at::Tensor unused;  // trains, but no micro-batch reaches it
  Chain() {
    for (int i = 0; i < 6; ++i) {
      weights.push_back(init_normal(7, "w" + std::to_string(i), {8, 8}, 0.3).set_requires_grad(true));
    }
    unused = at::zeros({4}).set_requires_grad(true);
  }
  // Reverse of the forward: the order the backward finishes them in.
  std::vector<at::Tensor> reduction_order() const {
    std::vector<at::Tensor> order(weights.rbegin(), weights.rend());
    order.push_back(unused);
    return order;
  }
  void backward(int rank, int micro) const {
    at::Tensor out = init_normal(200 + rank, "x" + std::to_string(micro), {3, 8}, 1.0);
    for (const at::Tensor& w : weights) out = out.matmul(w);
    (out * out).sum().backward();
  }
};

// Two micro-batches, the reduction armed before the second's backward:
// buckets of two weights (512 bytes) start while that backward is still on
// the weights before them, the sums match a reduction of the same gradients
// after the backward to the bit, and the bucket holding the parameter that
// never got a gradient waits for finish() and sums zeros.
HETPAR_WORKER(grad_reducer_overlaps_the_last_backward) {
  Group& dp = rt.world();
  const Chain overlapped, after;
  GradReducer reducer(overlapped.reduction_order(), dp, /*bucket_bytes=*/512, /*overlap=*/true);
  GradReducer reference(after.reduction_order(), dp, /*bucket_bytes=*/512, /*overlap=*/false);
  int started_when_w0_was_reached = -1;
  overlapped.weights[0].register_hook([&](const at::Tensor& g) {
    started_when_w0_was_reached = reducer.last_step().started_in_backward;
    return g;
  });
  for (GradReducer* r : {&reducer, &reference}) r->begin_step();
  overlapped.backward(rt.rank(), 0);
  require(reducer.last_step().started_in_backward == 0, "a bucket started before the reduction was armed");
  reducer.arm();
  overlapped.backward(rt.rank(), 1);
  after.backward(rt.rank(), 0);
  after.backward(rt.rank(), 1);
  // Buckets {w5, w4}, {w3, w2} ready before w0's gradient; {w1, w0} after it; {unused} only at finish.
  require(started_when_w0_was_reached == 2, "{} buckets had started when the backward reached w0, not 2",
          started_when_w0_was_reached);
  require(reducer.last_step().buckets == 4 && reducer.last_step().started_in_backward == 3,
          "{} of {} buckets started in the backward, not 3 of 4", reducer.last_step().started_in_backward,
          reducer.last_step().buckets);
  // Each bucket of two is a 512-byte copy: starting the third completed the first.
  require(reducer.last_step().most_copy_bytes == 1024, "{} bytes of bucket copies were alive at once, not 1024",
          reducer.last_step().most_copy_bytes);
  reducer.finish();
  reference.finish();
  for (size_t i = 0; i < overlapped.weights.size(); ++i) {
    require(at::equal(overlapped.weights[i].grad(), after.weights[i].grad()), "w{}: not the same sum", i);
  }
  require(at::equal(overlapped.unused.grad(), at::zeros({4})), "the gradient never produced is not zeros");
  // The sum over ranks, computed here for every rank's inputs.
  const Chain local;
  for (int r = 0; r < dp.size(); ++r) {
    local.backward(r, 0);
    local.backward(r, 1);
  }
  for (size_t i = 0; i < local.weights.size(); ++i) {
    expect_close(overlapped.weights[i].grad(), local.weights[i].grad(), "w" + std::to_string(i), 1e-6, 1e-6);
  }
}

// Armed too early (before the first of two micro-batches): the second
// backward's gradients land in buckets already summed, which must be an
// error naming the parameter, not a sum that leaves them out.
HETPAR_WORKER(grad_reducer_refuses_a_gradient_after_its_sum_started) {
  const Chain chain;
  std::vector<std::string> names;
  for (int i = 5; i >= 0; --i) names.push_back("w" + std::to_string(i));
  names.push_back("unused");
  GradReducer reducer(chain.reduction_order(), rt.world(), /*bucket_bytes=*/512, /*overlap=*/true, names);
  reducer.begin_step();
  reducer.arm();
  chain.backward(rt.rank(), 0);
  std::string error;
  try {
    chain.backward(rt.rank(), 1);
  } catch (const std::exception& e) {
    error = e.what();
  }
  require(error.find("the gradient of w5 landed after its data-parallel bucket's sum started") != std::string::npos,
          "no clear error for a gradient after its sum started: '{}'", error);
  reducer.finish();  // every rank started the same buckets: they complete
}

class GradReducerRanks : public ::testing::TestWithParam<int> {};

TEST_P(GradReducerRanks, StartsBucketsInTheLastBackwardWithTheSameSums) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("grad_reducer_overlaps_the_last_backward", GetParam())));
}

TEST_P(GradReducerRanks, RefusesAGradientAfterItsSumStarted) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("grad_reducer_refuses_a_gradient_after_its_sum_started", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GradReducerRanks, ::testing::Values(2, 3));

}  // namespace
}  // namespace hetpar::test

namespace hetpar::test {
namespace {

// Sharded (optim.shard_state): the same gradients as above reduce-scattered
// instead. Each rank's segments hold exactly its range of the aligned and
// padded buckets, together the sum of every value once; the unsummed gradients are dropped; gather_params puts
// every rank's segments back into every rank's parameters; and started in
// the last backward (the chain above) the kept sums are the same bits as
// reduce-scattering after it.
HETPAR_WORKER(grad_reducer_shards_the_sums) {
  Group& dp = rt.world();
  std::vector<at::Tensor> params = params_with_grads(rt.rank());
  GradReducer reducer(params, dp, /*bucket_bytes=*/64, /*overlap=*/false, {}, /*shard=*/true);
  require(reducer.sharded(), "a group of {} did not shard", dp.size());
  reducer.begin_step();
  reducer.finish();
  int64_t mine = 0;
  for (const GradReducer::Segment& s : reducer.segments()) {
    const at::Tensor want = expected_sum(s.param, dp.size()).reshape({-1}).narrow(0, s.offset, s.length);
    expect_close(s.grad, want, fmt::format("segment of {}", s.param), 1e-6, 1e-6);
    mine += s.length;
  }
  for (const at::Tensor& p : params) require(!p.grad().defined(), "an unsummed gradient was kept");
  at::Tensor count = at::full({1}, static_cast<double>(mine), at::kDouble);
  dp.all_reduce(count);
  int64_t total = 0;
  for (const auto& shape : kShapes) total += c10::multiply_integers(shape);
  require(count.item<int64_t>() == total, "the ranks' segments hold {} values, not {}", count.item<int64_t>(), total);
  // Each rank writes into its segments a value naming the element; gathering
  // must give every rank every element.
  for (const GradReducer::Segment& s : reducer.segments()) {
    at::NoGradGuard no_grad;
    s.values.copy_(at::arange(s.offset, s.offset + s.length, at::kFloat) + 1000.0 * static_cast<double>(s.param));
  }
  reducer.gather_params();
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor want = (at::arange(params[i].numel(), at::kFloat) + 1000.0 * static_cast<double>(i)).view(kShapes[i]);
    require(at::equal(params[i], want), "parameter {} was not gathered whole", i);
  }

  const Chain overlapped, after;
  GradReducer early(overlapped.reduction_order(), dp, 512, /*overlap=*/true, {}, /*shard=*/true);
  GradReducer late(after.reduction_order(), dp, 512, /*overlap=*/false, {}, /*shard=*/true);
  for (GradReducer* r : {&early, &late}) r->begin_step();
  overlapped.backward(rt.rank(), 0);
  early.arm();
  overlapped.backward(rt.rank(), 1);
  after.backward(rt.rank(), 0);
  after.backward(rt.rank(), 1);
  require(early.last_step().started_in_backward == 3, "{} sharded buckets started in the backward, not 3",
          early.last_step().started_in_backward);
  early.finish();
  late.finish();
  require(early.segments().size() == late.segments().size(), "different segments");
  for (size_t k = 0; k < early.segments().size(); ++k) {
    require(at::equal(early.segments()[k].grad, late.segments()[k].grad), "segment {}: not the same sum", k);
  }
}

TEST_P(GradReducerRanks, ShardsTheSumsAndGathersTheParameters) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("grad_reducer_shards_the_sums", GetParam())));
}

}  // namespace
}  // namespace hetpar::test
