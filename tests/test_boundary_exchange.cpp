// The boundary communicator on real ranks: embedding rows (a known function
// of image, token and channel) go from the encoder's layout to the LLM's, and
// gradients come back; both compared bit-exactly with the single-rank view
// (only data moves). Fan-in, fan-out, uneven ratios, ragged images, CP on the
// LLM side, LLM PP (rows to the first stage only), colocated and
// non-colocated, and the point-to-point halves training uses against the all-to-all.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "boundary/boundary_exchange.hpp"
#include "parallel/rank_grid.hpp"
#include "tests/dist_harness.hpp"

namespace hetpar::test {
namespace {

constexpr int64_t kHidden = 3, kTokens = 5, kSeqLen = 48;

// Row (image j, token t) as the encoder computes it, and its gradient as the LLM does.
at::Tensor value(int j, int64_t t, double salt) {
  return at::arange(kHidden, at::kFloat) + static_cast<float>(1000 * j + 10 * t) + static_cast<float>(salt);
}

HETPAR_WORKER(boundary_exchange) {
  const ModulePlacement p = placement_from_env();
  // 6 ragged samples: 0 to 3 images each.
  const BoundaryBatch batch{kSeqLen, kTokens, {{1}, {}, {2, 20, 40}, {1}, {}, {9, 30}}};
  const BoundaryPlan plan = plan_boundary(p, batch);
  const RankGrid encoder(p.encoder, p.encoder_ranks.offset);
  BoundaryExchange exchange(plan, kTokens, rt.world(), encoder.contains(rt.rank()) ? encoder.coord(rt.rank()).dp : -1);

  // Encoder side: the rows of this rank's DP group's images, in order.
  std::vector<at::Tensor> mine;
  if (encoder.contains(rt.rank())) {
    for (size_t j = 0; j < plan.image_encoder_dp.size(); ++j) {
      if (plan.image_encoder_dp[j] != encoder.coord(rt.rank()).dp) continue;
      for (int64_t t = 0; t < kTokens; ++t) mine.push_back(value(static_cast<int>(j), t, 0));
    }
  }
  at::Tensor rows = (mine.empty() ? at::zeros({0, kHidden}) : at::stack(mine)).set_requires_grad(true);
  at::Tensor out = exchange.forward(rows);

  require(out.size(0) == exchange.needed_rows(), "output rows");
  at::Tensor grad = at::zeros_like(out);
  for (int64_t i = 0; i < out.size(0); ++i) {
    const auto [j, t] = exchange.needed()[i];
    require(at::equal(out[i], value(j, t, 0)), "forward row {} (image {} token {}) is wrong", i, j, t);
    grad[i] = value(j, t, 0.5);
  }
  torch::autograd::backward({out}, {grad});
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const int first = static_cast<int>(std::find(plan.image_encoder_dp.begin(), plan.image_encoder_dp.end(),
                                                 encoder.coord(rt.rank()).dp) - plan.image_encoder_dp.begin());
    const int j = first + static_cast<int>(i / kTokens);
    require(at::equal(rows.grad()[i], value(j, i % kTokens, 0.5)),
            "gradient of image {} token {}: {} (summed replicas would be a multiple)", j, i % kTokens,
            rows.grad()[i][0].item<float>());
  }
  // Non-colocated training, and colocated training under LLM PP, use the
  // point-to-point halves of the same plan (a rank's rows for itself stay
  // local): they must move exactly the same rows and gradients.
  {
    std::vector<Group::Pending> sends = exchange.post_forward(rows, 40);
    const at::Tensor got = exchange.receive_forward(kHidden, 40);
    require(at::equal(got, out.detach()), "point-to-point forward differs from the all-to-all");
    std::vector<Group::Pending> grad_sends = exchange.post_backward(grad, 41);
    const at::Tensor back = exchange.receive_backward(kHidden, 41);
    require(back.size(0) == rows.size(0) && (rows.size(0) == 0 || at::equal(back, rows.grad())),
            "point-to-point backward differs from the all-to-all");
    for (Group::Pending& s : sends) s.wait();
    for (Group::Pending& s : grad_sends) s.wait();
  }
}

class BoundaryOnRanks : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(BoundaryOnRanks, ForwardAndBackwardExact) {
  EXPECT_TRUE(all_ranks_succeeded(run_placement_workers("boundary_exchange", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, BoundaryOnRanks,
    ::testing::Values(PlacementCase{"fan_in_4_to_1_noncolocated", "non-colocated", "1,1,1,4", "2,1,1,1", 6},
                      PlacementCase{"fan_out_1_to_2_colocated_enc_tp2", "colocated", "2,1,1,1", "1,1,1,2", 2},
                      PlacementCase{"dp3_to_dp2_colocated", "colocated", "2,1,1,3", "3,1,1,2", 6},
                      PlacementCase{"dp2_to_dp3_noncolocated", "non-colocated", "1,1,1,2", "1,1,1,3", 5},
                      PlacementCase{"llm_cp2_colocated", "colocated", "1,1,1,4", "1,2,1,2", 4},
                      PlacementCase{"llm_pp2_colocated", "colocated", "1,1,1,4", "1,1,2,2", 4},
                      PlacementCase{"llm_tp2_pp2_noncolocated", "non-colocated", "1,1,1,2", "2,1,2,1", 6},
                      PlacementCase{"uniform_tp2", "uniform", "1,1,1,1", "2,1,1,1", 2}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hetpar::test
