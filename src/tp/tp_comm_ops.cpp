#include "tp/tp_comm_ops.hpp"

#include <torch/autograd.h>

#include "tp/autograd_context.hpp"

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

void save_group(AutogradContext* ctx, Group& g) { save_pointer(ctx, "group", &g); }
Group& saved_group(AutogradContext* ctx) { return *saved_pointer<Group>(ctx, "group"); }

at::Tensor all_reduced(const at::Tensor& x, Group& g) {
  at::Tensor out = x.contiguous().clone();
  g.all_reduce(out);
  return out;
}

at::Tensor split_last_dim(const at::Tensor& x, Group& g) {
  const int64_t n = x.size(-1) / g.size();
  return x.narrow(-1, g.rank() * n, n).contiguous();
}

struct IdentityFwdAllReduceBwd : torch::autograd::Function<IdentityFwdAllReduceBwd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    save_group(ctx, *g);
    return x.view_as(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {all_reduced(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

struct AllReduceFwdIdentityBwd : torch::autograd::Function<AllReduceFwdIdentityBwd> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, Group* g) { return all_reduced(x, *g); }
  static tensor_list backward(AutogradContext*, tensor_list grads) { return {grads[0], at::Tensor()}; }
};

struct AllGatherFwdSplitBwd : torch::autograd::Function<AllGatherFwdSplitBwd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    save_group(ctx, *g);
    return all_gather_last_dim(x, *g);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {split_last_dim(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

struct SplitFwdAllGatherBwd : torch::autograd::Function<SplitFwdAllGatherBwd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    save_group(ctx, *g);
    return split_last_dim(x, *g);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {all_gather_last_dim(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_gather_last_dim(const at::Tensor& x, Group& group) {
  if (group.size() == 1) return x;
  // Gather along dim 0 (contiguous blocks), then move the rank blocks last.
  at::Tensor moved = x.movedim(-1, 0).contiguous();
  at::Tensor gathered = group.all_gather(moved);  // [size * n, ...]
  return gathered.movedim(0, -1).contiguous();
}

at::Tensor identity_fwd_allreduce_bwd(const at::Tensor& x, Group& tp) {
  return tp.size() == 1 ? x : IdentityFwdAllReduceBwd::apply(x, &tp);
}
at::Tensor allreduce_fwd_identity_bwd(const at::Tensor& x, Group& tp) {
  return tp.size() == 1 ? x : AllReduceFwdIdentityBwd::apply(x, &tp);
}
at::Tensor allgather_fwd_split_bwd(const at::Tensor& x, Group& tp) {
  return tp.size() == 1 ? x : AllGatherFwdSplitBwd::apply(x, &tp);
}
at::Tensor split_fwd_allgather_bwd(const at::Tensor& x, Group& tp) {
  return tp.size() == 1 ? x : SplitFwdAllGatherBwd::apply(x, &tp);
}

}  // namespace hetpar
