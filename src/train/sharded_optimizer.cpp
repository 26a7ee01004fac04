#include "train/sharded_optimizer.hpp"

#include <ATen/ATen.h>

#include <unordered_set>

namespace hetpar {

std::vector<FusedAdamW::Target> optimizer_targets(const std::vector<at::Tensor>& params,
                                                  const std::vector<const GradReducer*>& reducers) {
  std::vector<FusedAdamW::Target> targets;
  std::unordered_set<const void*> by_segments;
  for (const GradReducer* r : reducers) {
    if (r == nullptr || !r->sharded()) continue;
    for (const at::Tensor& p : r->params()) by_segments.insert(p.unsafeGetTensorImpl());
    for (const GradReducer::Segment& s : r->segments()) {
      FusedAdamW::Target segment = FusedAdamW::whole(r->params()[s.param]);  // its parameter's decay
      segment.values = s.values;
      segment.grad = s.grad;
      segment.offset = s.offset;
      targets.push_back(std::move(segment));
    }
  }
  for (const at::Tensor& p : params) {
    if (by_segments.count(p.unsafeGetTensorImpl()) == 0) targets.push_back(FusedAdamW::whole(p));
  }
  return targets;
}

FullOptimizerState::FullOptimizerState(const FusedAdamW& optimizer, const std::vector<const GradReducer*>& reducers)
    : optimizer_(optimizer) {
  for (const GradReducer* r : reducers) {
    if (r == nullptr || !r->sharded() || r->params().empty()) continue;
    // Every target takes a step each step when sharded (a missing gradient is
    // zeros): one count for all, the group's largest, since a rank may hold
    // no segment at all (a small bucket's padding).
    at::Tensor step = r->segments().empty() ? at::zeros({}, r->params().front().options())
                                            : optimizer.state_of(r->params()[r->segments().front().param]).step.clone();
    r->group().all_reduce(step, ReduceOp::kMax);
    std::vector<at::Tensor> avg, avg_sq, whole_avg, whole_avg_sq;
    for (const GradReducer::Segment& s : r->segments()) {
      const FusedAdamW::State state = optimizer.state_of(r->params()[s.param]);
      avg.push_back(state.exp_avg);
      avg_sq.push_back(state.exp_avg_sq);
    }
    // On the host: whole moments on the device would take back, at every
    // save, the memory the sharding saves (each bucket passes through the
    // device on its way).
    for (const at::Tensor& p : r->params()) {
      whole_avg.push_back(at::empty(p.sizes(), p.options().device(at::kCPU)));
      whole_avg_sq.push_back(at::empty(p.sizes(), p.options().device(at::kCPU)));
    }
    r->gather(avg, whole_avg);
    r->gather(avg_sq, whole_avg_sq);
    for (size_t i = 0; i < r->params().size(); ++i) {
      gathered_[r->params()[i].unsafeGetTensorImpl()] = {whole_avg[i], whole_avg_sq[i], step.clone(), 0};
    }
  }
}

FusedAdamW::State FullOptimizerState::of(const at::Tensor& param) const {
  const auto it = gathered_.find(param.unsafeGetTensorImpl());
  return it != gathered_.end() ? it->second : optimizer_.state_of(param);
}

void load_state_part(at::Tensor into, const at::Tensor& whole, int64_t offset) {
  if (into.sizes() == whole.sizes() && offset == 0) {
    into.copy_(whole);
    return;
  }
  into.copy_(whole.reshape({-1}).narrow(0, offset, into.numel()).view(into.sizes()));
}

}  // namespace hetpar
