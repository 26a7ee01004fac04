// The boundary communicator on ranks: moves image embedding rows from the
// encoder's layout to the LLM's as an autograd operation, following a
// BoundaryPlan; its backward is the exact adjoint (each gradient row arrives
// once at every encoder TP rank of its source group, assigned, not summed).
// One all-to-all-v over a group spanning both modules serves colocated and
// non-colocated placements alike.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <vector>

#include "boundary/routing_plan.hpp"
#include "dist/group.hpp"

namespace hetpar {

// The point-to-point halves' communicators, one per direction
// (dist/p2p_groups.hpp); null: the exchange's group. Same members as it.
struct BoundaryLinks {
  Group* data = nullptr;
  Group* gradient = nullptr;
};

class BoundaryExchange {
 public:
  // `group` spans every rank of both modules, in job-rank order (the world);
  // `encoder_dp` is this rank's encoder DP coordinate, or -1 off the encoder.
  BoundaryExchange(const BoundaryPlan& plan, int64_t tokens_per_image, Group& group, int encoder_dp,
                   BoundaryLinks links = {});

  // encoder_rows: on an encoder rank, the rows of its DP group's images in
  // image order, [images * tokens_per_image, hidden]; elsewhere an empty
  // [0, hidden] tensor that requires grad (so the backward reaches every rank).
  // Returns the rows this rank needs as an LLM rank, in (image, token) order:
  // [needed_rows(), hidden] (empty on encoder-only ranks). Every rank of the
  // group must call it, and later take part in its backward.
  at::Tensor forward(const at::Tensor& encoder_rows);

  // The same exchange as point-to-point halves, for placements where the two
  // modules share no rank and must not wait for each other: the encoder posts
  // its rows and goes on (running ahead), the LLM receives them when it needs
  // them, and the gradients come back the same way. Only data moves, so the
  // caller wires autograd: the LLM side receives a leaf, the encoder side
  // calls backward on its rows with the gradient it receives. `tag` tells
  // micro-batches apart. Rows a rank sends itself (colocated) stay in this
  // object until it receives them, so it must post before it receives; such
  // a rank (on both sides of a direction) also posts its receives with its
  // sends, in an order every pair agrees on (NCCL matches a pair's messages
  // in issue order). The receiver names the dtype (and device) the sender's rows have
  // (the run's activations).
  std::vector<Group::Pending> post_forward(const at::Tensor& encoder_rows, int tag) const;
  at::Tensor receive_forward(int64_t hidden, int tag, const at::TensorOptions& options = at::kFloat) const;  // [needed_rows(), hidden]
  std::vector<Group::Pending> post_backward(const at::Tensor& grad_rows, int tag) const;
  // [this rank's encoder rows, hidden]
  at::Tensor receive_backward(int64_t hidden, int tag, const at::TensorOptions& options = at::kFloat) const;

  int64_t needed_rows() const { return static_cast<int64_t>(needed_.size()); }
  // (image, token) of each returned row.
  const std::vector<std::pair<int, int64_t>>& needed() const { return needed_; }

  struct Route {            // one direction of the exchange, from this rank's view
    std::vector<int64_t> send_index;   // local rows to send, grouped by peer in rank order
    std::vector<int64_t> send_counts;  // per group rank
    std::vector<int64_t> recv_index;   // where each received row goes, in arrival order
    std::vector<int64_t> recv_counts;
  };
  using Posted = std::map<int, std::vector<std::pair<int, Group::Pending>>>;  // by tag: (peer, receive)

 private:
  Group& group_;
  Group& data_;      // the point-to-point halves: rows forward
  Group& gradient_;  // and their gradients back
  std::vector<std::pair<int, int64_t>> needed_;
  Route forward_, backward_;
  int64_t encoder_rows_ = 0;  // rows this rank holds as an encoder rank
  mutable std::map<int, at::Tensor> to_self_;  // point-to-point rows for this rank itself, by tag
  mutable Posted posted_;                      // receives posted with this rank's sends, by tag
};

}  // namespace hetpar
