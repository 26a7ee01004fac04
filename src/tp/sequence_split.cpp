#include "tp/sequence_split.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include <stdexcept>

#include "tp/autograd_context.hpp"

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

constexpr int64_t kSeqDim = 1;

void check_divisible(const at::Tensor& x, const Group& g, const char* what) {
  if (x.dim() < 2 || x.size(kSeqDim) % g.size() != 0) {
    throw std::invalid_argument(fmt::format("{}: the sequence (dim 1 of {}) does not divide over {} ranks of {}", what,
                                            fmt::join(x.sizes(), "x"), g.size(), g.name()));
  }
}

// The collectives work on dim 0: the sequence goes first for them and back after.
at::Tensor gathered(const at::Tensor& x, Group& g) {
  return g.all_gather(x.movedim(kSeqDim, 0).contiguous()).movedim(0, kSeqDim).contiguous();
}

at::Tensor summed_part(const at::Tensor& x, Group& g) {
  check_divisible(x, g, "sum_scatter_sequence");
  return g.reduce_scatter(x.movedim(kSeqDim, 0).contiguous()).movedim(0, kSeqDim).contiguous();
}

Group& saved_group(AutogradContext* ctx) { return *saved_pointer<Group>(ctx, "group"); }

struct SumScatterSequence : torch::autograd::Function<SumScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    save_pointer(ctx, "group", g);
    return summed_part(x, *g);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {gathered(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_gather_sequence(const at::Tensor& x, Group& tp) { return tp.size() == 1 ? x : gathered(x, tp); }
at::Tensor reduce_scatter_sequence(const at::Tensor& x, Group& tp) { return tp.size() == 1 ? x : summed_part(x, tp); }

at::Tensor sum_scatter_sequence(const at::Tensor& x, Group& tp) {
  return tp.size() == 1 ? x : SumScatterSequence::apply(x, &tp);
}

}  // namespace hetpar
