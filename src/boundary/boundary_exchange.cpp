#include "boundary/boundary_exchange.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "tp/autograd_context.hpp"
#include "util/host_to_device.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace hetpar {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using Row = std::pair<int, int64_t>;

// Sends rows `send_index` of `rows` per the route; returns a [out_rows, hidden]
// tensor with each received row at its `recv_index`.
at::Tensor move_rows(const at::Tensor& rows, const BoundaryExchange::Route& route, int64_t out_rows, Group& group) {
  const at::Tensor send_index = index_on(route.send_index, rows.device());
  const at::Tensor send = rows.index_select(0, send_index);
  const at::Tensor got = group.all_to_all_v(send, route.send_counts, route.recv_counts);
  const at::Tensor recv_index = index_on(route.recv_index, rows.device());
  return at::zeros({out_rows, rows.size(1)}, rows.options()).index_copy(0, recv_index, got);
}

// The point-to-point form of move_rows: posts one send per peer. Rows for
// this rank itself (colocated) wait in `to_self` under their tag. A rank that
// also receives in this direction (colocated, a first-stage rank) posts its
// receives here too, into `posted`, in one order both sides of every pair
// agree on: peers ascending, with a lower peer receive then send, with a
// higher one send then receive. On NCCL, where a pair's messages match in
// issue order on one stream, two ranks that both sent first would deadlock.
std::vector<Group::Pending> post_rows(const at::Tensor& rows, const BoundaryExchange::Route& route, Group& group,
                                      int tag, std::map<int, at::Tensor>& to_self, BoundaryExchange::Posted& posted) {
  const at::Tensor send = rows.index_select(0, index_on(route.send_index, rows.device()));
  bool receives = false;
  for (int peer = 0; peer < group.size(); ++peer) receives |= peer != group.rank() && route.recv_counts[peer] > 0;
  std::vector<Group::Pending> pending;
  std::vector<std::pair<int, Group::Pending>> received;
  int64_t offset = 0;
  for (int peer = 0; peer < group.size(); ++peer) {
    const int64_t count = route.send_counts[peer];
    const auto receive = [&] {
      if (receives && peer != group.rank() && route.recv_counts[peer] > 0) {
        received.emplace_back(peer, group.irecv(at::empty({route.recv_counts[peer], rows.size(1)}, rows.options()), peer, tag));
      }
    };
    if (peer < group.rank()) receive();
    if (count > 0) {
      if (peer == group.rank()) to_self[tag] = send.narrow(0, offset, count);
      else pending.push_back(group.isend(send.narrow(0, offset, count), peer, tag));
    }
    offset += count;
    if (peer > group.rank()) receive();
  }
  if (receives) posted[tag] = std::move(received);
  return pending;
}

// Receives what post_rows sent this rank: [out_rows, hidden], each row at its
// recv_index; the receives post_rows already posted, or posts them now.
at::Tensor receive_rows(const BoundaryExchange::Route& route, int64_t out_rows, int64_t hidden, Group& group, int tag,
                        const at::TensorOptions& options, std::map<int, at::Tensor>& to_self,
                        BoundaryExchange::Posted& posted) {
  std::vector<std::pair<int, Group::Pending>> pending;
  if (const auto it = posted.find(tag); it != posted.end()) {
    pending = std::move(it->second);
    posted.erase(it);
  } else {
    for (int peer = 0; peer < group.size(); ++peer) {
      if (route.recv_counts[peer] > 0 && peer != group.rank()) {
        pending.emplace_back(peer, group.irecv(at::empty({route.recv_counts[peer], hidden}, options), peer, tag));
      }
    }
  }
  std::vector<at::Tensor> parts;
  auto next = pending.begin();
  for (int peer = 0; peer < group.size(); ++peer) {  // in peer order, as recv_index expects
    if (route.recv_counts[peer] == 0) continue;
    if (peer != group.rank()) {
      parts.push_back((next++)->second.wait().to(options));
      continue;
    }
    const auto own = to_self.find(tag);
    if (own == to_self.end()) throw std::logic_error("boundary point-to-point path: this rank's own rows were not posted before they were received");
    parts.push_back(own->second.to(options));
    to_self.erase(own);
  }
  at::Tensor out = at::zeros({out_rows, hidden}, options);
  if (parts.empty()) return out;
  // In place, and with one sender its buffer as it is: two rows' copies fewer at the peak.
  return out.index_copy_(0, index_on(route.recv_index, options.device()), parts.size() == 1 ? parts[0] : at::cat(parts));
}

struct Exchange : torch::autograd::Function<Exchange> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const BoundaryExchange::Route* fwd,
                            const BoundaryExchange::Route* bwd, int64_t out_rows, Group* group) {
    save_pointer(ctx, "bwd", bwd);
    save_pointer(ctx, "group", group);
    ctx->saved_data["in_rows"] = rows.size(0);
    return move_rows(rows, *fwd, out_rows, *group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    at::Tensor grad = move_rows(grads[0].contiguous(), *saved_pointer<const BoundaryExchange::Route>(ctx, "bwd"),
                                ctx->saved_data["in_rows"].toInt(), *saved_pointer<Group>(ctx, "group"));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Orders a direction's blocks by peer, expanding them to row positions.
BoundaryExchange::Route make_route(const Transfers& transfers, const Group& group, int me,
                                   const std::function<int64_t(const Row&)>& send_pos,
                                   const std::function<int64_t(const Row&)>& recv_pos) {
  BoundaryExchange::Route route;
  route.send_counts.assign(group.size(), 0);
  route.recv_counts.assign(group.size(), 0);
  for (int peer = 0; peer < group.size(); ++peer) {
    const int peer_rank = group.ranks()[peer];
    if (const auto it = transfers.find({me, peer_rank}); it != transfers.end()) {
      for (const RowBlock& b : it->second) {
        for (int64_t t = b.first_token; t < b.first_token + b.tokens; ++t) route.send_index.push_back(send_pos({b.image, t}));
        route.send_counts[peer] += b.tokens;
      }
    }
    if (const auto it = transfers.find({peer_rank, me}); it != transfers.end()) {
      for (const RowBlock& b : it->second) {
        for (int64_t t = b.first_token; t < b.first_token + b.tokens; ++t) route.recv_index.push_back(recv_pos({b.image, t}));
        route.recv_counts[peer] += b.tokens;
      }
    }
  }
  return route;
}

}  // namespace

BoundaryExchange::BoundaryExchange(const BoundaryPlan& plan, int64_t tokens_per_image, Group& group, int encoder_dp,
                                   BoundaryLinks links)
    : group_(group), data_(links.data ? *links.data : group), gradient_(links.gradient ? *links.gradient : group) {
  if (data_.ranks() != group.ranks() || gradient_.ranks() != group.ranks()) {
    throw std::logic_error("boundary exchange: the point-to-point groups must have the exchange group's members");
  }
  const int me = group.ranks()[group.rank()];
  // The rows this rank needs (as a forward receiver), in (image, token) order.
  std::set<Row> needed;
  for (const auto& [pair, blocks] : plan.forward) {
    if (pair.second != me) continue;
    for (const RowBlock& b : blocks) {
      for (int64_t t = b.first_token; t < b.first_token + b.tokens; ++t) needed.insert({b.image, t});
    }
  }
  needed_.assign(needed.begin(), needed.end());
  std::map<Row, int64_t> needed_pos;
  for (size_t i = 0; i < needed_.size(); ++i) needed_pos[needed_[i]] = static_cast<int64_t>(i);
  auto llm_pos = [&](const Row& r) { return needed_pos.at(r); };

  // As an encoder rank: its DP group's images, a contiguous run in the plan.
  const auto& owner = plan.image_encoder_dp;
  const int first_image = static_cast<int>(std::find(owner.begin(), owner.end(), encoder_dp) - owner.begin());
  encoder_rows_ = std::count(owner.begin(), owner.end(), encoder_dp) * tokens_per_image;
  auto encoder_pos = [&](const Row& r) { return (r.first - first_image) * tokens_per_image + r.second; };

  forward_ = make_route(plan.forward, group, me, encoder_pos, llm_pos);
  backward_ = make_route(plan.backward, group, me, llm_pos, encoder_pos);
}

at::Tensor BoundaryExchange::forward(const at::Tensor& encoder_rows) {
  if (encoder_rows.size(0) != encoder_rows_) {
    throw std::invalid_argument("boundary exchange: this rank should pass " + std::to_string(encoder_rows_) +
                                " encoder rows, got " + std::to_string(encoder_rows.size(0)));
  }
  return Exchange::apply(encoder_rows, &forward_, &backward_, needed_rows(), &group_);
}

std::vector<Group::Pending> BoundaryExchange::post_forward(const at::Tensor& encoder_rows, int tag) const {
  if (encoder_rows.size(0) != encoder_rows_) {
    throw std::invalid_argument("boundary exchange: this rank should post " + std::to_string(encoder_rows_) +
                                " encoder rows, got " + std::to_string(encoder_rows.size(0)));
  }
  return post_rows(encoder_rows.detach(), forward_, data_, tag, to_self_, posted_);
}

at::Tensor BoundaryExchange::receive_forward(int64_t hidden, int tag, const at::TensorOptions& options) const {
  return receive_rows(forward_, needed_rows(), hidden, data_, tag, options, to_self_, posted_);
}

std::vector<Group::Pending> BoundaryExchange::post_backward(const at::Tensor& grad_rows, int tag) const {
  return post_rows(grad_rows, backward_, gradient_, tag, to_self_, posted_);
}

at::Tensor BoundaryExchange::receive_backward(int64_t hidden, int tag, const at::TensorOptions& options) const {
  return receive_rows(backward_, encoder_rows_, hidden, gradient_, tag, options, to_self_, posted_);
}

}  // namespace hetpar
