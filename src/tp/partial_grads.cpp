#include "tp/partial_grads.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <stdexcept>

#include "model/norms.hpp"
#include "tp/parallel_linear.hpp"

namespace hetpar {

std::vector<at::Tensor> tp_partial_parameters(torch::nn::Module& root) {
  std::vector<at::Tensor> partial;
  const auto visit = [&](torch::nn::Module* m) {
    if (auto* norm = dynamic_cast<RMSNorm*>(m); norm != nullptr && norm->sees_part_of_sequence()) {
      partial.push_back(norm->weight);
    } else if (auto* row = dynamic_cast<RowParallelLinear*>(m);
               row != nullptr && row->bias.defined() && row->sees_part_of_sequence()) {
      partial.push_back(row->bias);
    }
  };
  visit(&root);  // the root apart: modules() can list itself only when a shared_ptr holds it
  for (const auto& m : root.modules(/*include_self=*/false)) visit(m.get());
  return partial;
}

void sum_over_group(const std::vector<at::Tensor>& tensors, Group& group) {
  if (group.size() == 1 || tensors.empty()) return;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) {
    if (t.scalar_type() != tensors.front().scalar_type() || !t.is_contiguous()) {
      throw std::invalid_argument(fmt::format("sum_over_group: tensors of {} and {}, or not contiguous",
                                              c10::toString(tensors.front().scalar_type()),
                                              c10::toString(t.scalar_type())));
    }
    flat.push_back(t.view(-1));
  }
  at::Tensor joined = at::cat(flat);
  group.all_reduce(joined);
  int64_t at = 0;
  for (const at::Tensor& f : flat) {
    f.copy_(joined.narrow(0, at, f.numel()));
    at += f.numel();
  }
}

}  // namespace hetpar
