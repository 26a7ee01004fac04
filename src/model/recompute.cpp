#include "model/recompute.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <memory>
#include <type_traits>

#include "model/autocast_scope.hpp"

namespace hetpar {
namespace {

using torch::autograd::variable_list;

// The engine holds its nodes by std::shared_ptr in the older LibTorch hetpar
// builds against and by c10::intrusive_ptr in the newer: an edge's type says which.
using NodePtr = decltype(torch::autograd::Edge::function);
template <typename T, typename... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

// The backward of a recomputed layer: the forward again, with a graph, and
// that graph's backward (reentrant: the engine runs it inside this node).
class RecomputeBackward : public torch::autograd::Node {
 public:
  RecomputeBackward(std::function<at::Tensor(const at::Tensor&)> layer, at::Tensor input, bool autocast)
      : layer_(std::move(layer)), input_(std::move(input)), autocast_(autocast) {}

  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return {at::Tensor()};  // nothing flows back through this layer
    TORCH_CHECK(layer_ != nullptr, "a recomputed layer's backward ran a second time: its graph is not kept "
                                   "(retain_graph is not supported with run.recompute)");
    const bool input_grad = should_compute_output(0);
    const at::Tensor x = input_.detach().requires_grad_(input_grad);
    at::Tensor y;
    {
      const at::AutoGradMode with_graph(true);
      const AutocastScope autocast(autocast_);
      y = layer_(x);
    }
    torch::autograd::backward({y}, {grads[0]});
    release_variables();
    return {input_grad ? x.grad() : at::Tensor()};
  }

  void release_variables() override {
    layer_ = nullptr;
    input_.reset();
  }
  std::string name() const override { return "RecomputeBackward"; }

 private:
  std::function<at::Tensor(const at::Tensor&)> layer_;
  at::Tensor input_;  // the value only: the graph before it is this node's next edge
  bool autocast_;
};

}  // namespace

at::Tensor recompute_in_backward(const torch::nn::Module& module,
                                 const std::function<at::Tensor(const at::Tensor&)>& layer, const at::Tensor& x) {
  const auto params = module.parameters();
  const bool trains = std::any_of(params.begin(), params.end(), [](const at::Tensor& p) { return p.requires_grad(); });
  if (!at::GradMode::is_enabled() || (!x.requires_grad() && !trains)) return layer(x);
  at::Tensor y;
  {
    const at::NoGradGuard no_graph;
    y = layer(x);
  }
  const bool autocast = at::autocast::is_autocast_enabled(x.device().type());
  const NodePtr node = make_node<RecomputeBackward>(layer, x.detach(), autocast);
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace hetpar
