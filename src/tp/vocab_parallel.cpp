#include "tp/vocab_parallel.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "model/param_init.hpp"
#include "tp/tp_comm_ops.hpp"

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Forward: softmax statistics reduced over the TP group (max, sum of exp, the
// target's logit, each found on exactly one rank). Backward: softmax - onehot
// on the local shard, no communication.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets, Group* tp) {
    const int64_t local_vocab = logits.size(1);
    const int64_t first = tp->rank() * local_vocab;
    at::Tensor max = std::get<0>(logits.max(1));
    tp->all_reduce(max, ReduceOp::kMax);
    at::Tensor shifted = logits - max.unsqueeze(1);
    at::Tensor exp = shifted.exp();
    at::Tensor sum_exp = exp.sum(1);
    tp->all_reduce(sum_exp);

    const at::Tensor valid = targets >= 0;
    const at::Tensor mine = valid & (targets >= first) & (targets < first + local_vocab);
    const at::Tensor local_index = at::where(mine, targets - first, at::zeros_like(targets));
    at::Tensor target_logit = shifted.gather(1, local_index.unsqueeze(1)).squeeze(1) * mine;
    tp->all_reduce(target_logit);

    at::Tensor loss = (sum_exp.log() - target_logit) * valid;
    at::Tensor softmax = exp / sum_exp.unsqueeze(1);
    ctx->save_for_backward({softmax, local_index, mine, valid});
    return loss;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &softmax = saved[0], &local_index = saved[1], &mine = saved[2], &valid = saved[3];
    at::Tensor grad = softmax.clone();
    grad.scatter_add_(1, local_index.unsqueeze(1), -mine.to(grad.scalar_type()).unsqueeze(1));
    grad.mul_((grads[0] * valid).unsqueeze(1));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

// Forward: the table's rows for `local` ids. Backward: each row's gradient
// added in place into the weight's fp32 .grad at its row, and none returned.
// The library's embedding backward writes a dense [vocab/tp, hidden] gradient
// every micro-batch, which autograd then adds into .grad (4 + 12 bytes a
// weight, each micro-batch); this touches the micro-batch's rows only (and a
// step's first micro-batch fills .grad's zeros: 4 bytes a weight).
// Accumulating with index_put_ keeps repeated ids in a fixed order on a GPU,
// where index_add_ would race. A frozen table runs the forward alone.
struct EmbeddingRows : torch::autograd::Function<EmbeddingRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& local) {
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["local"] = local;
    return at::embedding(weight, local);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const at::Tensor local = ctx->saved_data["local"].toTensor();
    at::Tensor& grad = weight.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(weight, at::MemoryFormat::Contiguous);
    grad.index_put_({local.reshape({-1})}, grads[0].reshape({-1, weight.size(1)}).to(weight.scalar_type()),
                    /*accumulate=*/true);
    return {at::Tensor(), at::Tensor()};
  }
};

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const std::string& name, int64_t vocab, int64_t hidden,
                                               uint64_t seed, double init_std, Group& tp, TpSequence output)
    : tp_(tp), first_(tp.rank() * (vocab / tp.size())), count_(vocab / tp.size()), output_(output) {
  weight = register_parameter(
      "weight", shard(init_normal(seed, name + ".weight", {vocab, hidden}, init_std), 0, tp.rank(), tp.size()));
}

at::Tensor VocabParallelEmbedding::forward(const at::Tensor& ids) {
  if (tp_.size() == 1) return EmbeddingRows::apply(weight, ids);  // one rank holds every id
  // Ids another rank holds read row 0 here and are zeroed, their gradient with them.
  const at::Tensor mine = (ids >= first_) & (ids < first_ + count_);
  const at::Tensor local = at::where(mine, ids - first_, at::zeros_like(ids));
  const at::Tensor rows = EmbeddingRows::apply(weight, local) * mine.unsqueeze(-1).to(weight.scalar_type());
  return output_ == TpSequence::kSplit ? sum_scatter_sequence(rows, tp_) : allreduce_fwd_identity_bwd(rows, tp_);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& targets, Group& tp) {
  return VocabParallelCrossEntropy::apply(local_logits, targets, &tp);
}

at::Tensor cross_entropy_sum(const at::Tensor& local_logits, const at::Tensor& targets, Group& tp) {
  if (tp.size() > 1) return vocab_parallel_cross_entropy(local_logits.to(at::kFloat), targets, tp).sum();
  constexpr int64_t kIgnored = -100;  // NLL's marker; any negative target is ignored
  return at::nll_loss(at::log_softmax(local_logits, 1, at::kFloat), targets.masked_fill(targets < 0, kIgnored), {},
                      at::Reduction::Sum, kIgnored);
}

}  // namespace hetpar
