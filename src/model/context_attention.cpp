#include "model/context_attention.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "tp/autograd_context.hpp"
#include "util/host_to_device.hpp"

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Dim 0 gathered from every CP rank (rank blocks in rank order) forward; the
// gradient's rank blocks summed back to their owners backward.
struct AllGatherFwdReduceScatterBwd : torch::autograd::Function<AllGatherFwdReduceScatterBwd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    save_pointer(ctx, "group", g);
    return g->all_gather(x.contiguous());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {saved_pointer<Group>(ctx, "group")->reduce_scatter(grads[0].contiguous()), at::Tensor()};
  }
};

// Where each global position's row sits in the gathered tensor: rank i's
// block is [chunk i, chunk 2cp-1-i], each `chunk` rows.
at::Tensor gathered_row_of_position(int64_t chunk, int cp) {
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(2 * cp * chunk));
  for (int g = 0; g < 2 * cp; ++g) {
    const int64_t start = g < cp ? 2 * g * chunk : (2 * (2 * cp - 1 - g) + 1) * chunk;
    for (int64_t t = 0; t < chunk; ++t) rows.push_back(start + t);
  }
  return at::tensor(rows, at::kLong);
}

}  // namespace

at::Tensor cp_positions(int64_t seq_len, int cp_rank, int cp_size) {
  const int64_t chunk = seq_len / (2 * cp_size);
  return at::cat({at::arange(cp_rank * chunk, (cp_rank + 1) * chunk, at::kLong),
                  at::arange((2 * cp_size - 1 - cp_rank) * chunk, (2 * cp_size - cp_rank) * chunk, at::kLong)});
}

at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Group& cp) {
  const bool gqa = k.size(1) != q.size(1);
  if (cp.size() == 1) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, gqa);
  const int64_t local = q.size(2), chunk = local / 2;
  // K and V in one collective, sequence first: [S_local, 2, B, H_kv, d] -> the whole sequence in position order.
  const at::Tensor kv_local = at::stack({k, v}).permute({3, 0, 1, 2, 4});
  const at::Tensor gathered = AllGatherFwdReduceScatterBwd::apply(kv_local, &cp);
  const at::Tensor order = host_to_device(gathered_row_of_position(chunk, cp.size()), q.device());
  const at::Tensor kv = gathered.index_select(0, order).permute({1, 2, 3, 0, 4});
  const at::Tensor keys = kv.select(0, 0), values = kv.select(0, 1);  // [B, H_kv, S, d]

  // Each local chunk attends to the keys up to its own end; the diagonal block is causal by position.
  std::vector<at::Tensor> outputs;
  for (int half = 0; half < 2; ++half) {
    const int64_t g = half == 0 ? cp.rank() : 2 * cp.size() - 1 - cp.rank();
    const int64_t key_count = (g + 1) * chunk;
    const auto on_device = at::TensorOptions(at::kLong).device(q.device());
    const at::Tensor query_pos = at::arange(g * chunk, key_count, on_device).unsqueeze(1);
    const at::Tensor mask = at::arange(key_count, on_device).unsqueeze(0) <= query_pos;  // [chunk, key_count]
    outputs.push_back(at::scaled_dot_product_attention(q.narrow(2, half * chunk, chunk), keys.narrow(2, 0, key_count),
                                                       values.narrow(2, 0, key_count), mask, 0.0, false,
                                                       std::nullopt, gqa));
  }
  // Joined sequence first in memory, as a single kernel lays its output out
  // (model/rope.hpp): the output projection then reads it as a view.
  return at::cat({outputs[0].transpose(1, 2), outputs[1].transpose(1, 2)}, 1).transpose(1, 2);
}

}  // namespace hetpar
