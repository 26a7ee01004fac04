#include "dist/group.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "dist/comm_trace.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

Group::Group(std::string name, std::vector<int> ranks, int job_rank,
             c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout)
    : name_(std::move(name)), ranks_(std::move(ranks)), backend_(std::move(backend)),
      timeout_(timeout) {
  const auto it = std::find(ranks_.begin(), ranks_.end(), job_rank);
  if (it == ranks_.end()) throw std::logic_error("rank " + std::to_string(job_rank) + " is not in group " + name_);
  rank_ = static_cast<int>(it - ranks_.begin());
  if (!backend_ && size() > 1) throw std::logic_error("group " + name_ + " has no backend");
  if (size() > 1) trace_ = CommTrace::for_rank(job_rank);  // a group of one never communicates
}

int64_t Group::trace(const char* kind, const at::Tensor& tensor, int peer, int tag) const {
  if (trace_ == nullptr) return -1;
  TraceOp op{name_, ranks_, kind};
  if (peer >= 0) op.peer = ranks_[peer];
  op.tag = tag;
  op.count = tensor.defined() ? tensor.numel() : 0;
  op.dtype = tensor.defined() ? std::string(c10::toString(tensor.scalar_type())) : "";
  return trace_->record(op);
}

void Group::fail(const char* call, const std::string& why) const {
  throw CollectiveError(fmt::format("{} on group {} (rank {} of {}, job ranks [{}]) failed: {}", call,
                                    name_, rank_, size(), fmt::join(ranks_, ","), why));
}

c10::intrusive_ptr<c10d::Work> Group::start(const char* call,
                                            const std::function<c10::intrusive_ptr<c10d::Work>()>& post) const {
  try {
    return post();
  } catch (const std::exception& e) {
    fail(call, error_message(e));
  }
}

void Group::complete(const char* call, int64_t trace_id,
                     const std::function<c10::intrusive_ptr<c10d::Work>()>& post) const {
  wait(start(call, post), call, trace_id);
}

void Group::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* call, int64_t trace_id) const {
  if (trace_id >= 0) trace_->waited(trace_id);  // before blocking: a hung run's trace shows the wait
  try {
    if (!work->wait(timeout_)) fail(call, "timed out");
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    fail(call, error_message(e));
  }
}

void Group::check_peer(int peer, const char* call) const {
  if (peer < 0 || peer >= size() || peer == rank_) fail(call, fmt::format("bad peer {}", peer));
}

Group::Pending Group::start_all_reduce(const at::Tensor& tensor, ReduceOp op) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = timeout_;
  const int64_t id = trace("all_reduce", tensor);
  return Pending(this, start("all_reduce", [&] { return backend_->allreduce(tensors, opts); }), tensor, "all_reduce", id);
}

void Group::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (size() == 1) return;
  RECORD_FUNCTION("group::all_reduce", std::vector<c10::IValue>{tensor});  // named in op profiles
  start_all_reduce(tensor, op).wait();
}

at::Tensor Group::all_gather(const at::Tensor& tensor) {
  if (size() == 1) return tensor.clone();
  std::vector<int64_t> shape = tensor.sizes().vec();
  if (shape.empty()) shape.push_back(1);
  shape[0] *= size();
  at::Tensor output = at::empty(shape, tensor.options());
  all_gather_into(output, tensor);
  return output;
}

void Group::all_gather_into(at::Tensor output, const at::Tensor& tensor) {
  if (!output.is_contiguous() || output.numel() != tensor.numel() * size()) {
    fail("all_gather", fmt::format("an output of {} values (contiguous: {}) for {} members' {}", output.numel(),
                                   output.is_contiguous(), size(), tensor.numel()));
  }
  if (size() == 1) {
    output.view_as(tensor).copy_(tensor);
    return;
  }
  RECORD_FUNCTION("group::all_gather", std::vector<c10::IValue>{tensor});  // named in op profiles
  at::Tensor input = tensor.contiguous();
  c10d::AllgatherOptions opts;
  opts.timeout = timeout_;
  const int64_t id = trace("all_gather", input);
  complete("all_gather", id, [&] { return backend_->_allgather_base(output, input, opts); });
}

at::Tensor Group::reduce_scatter(const at::Tensor& tensor) {
  check_reduce_scatter_rows(tensor);
  if (size() == 1) return tensor.clone();
  RECORD_FUNCTION("group::reduce_scatter", std::vector<c10::IValue>{tensor});  // named in op profiles
  const at::Tensor input = tensor.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] /= size();
  return start_reduce_scatter(input, at::empty(shape, input.options())).wait();
}

Group::Pending Group::ireduce_scatter(const at::Tensor& input, at::Tensor output) {
  if (!input.is_contiguous() || !output.is_contiguous()) fail("reduce_scatter", "the tensors must be contiguous");
  check_reduce_scatter_rows(input);
  if (output.numel() * size() != input.numel()) {
    fail("reduce_scatter", fmt::format("an output of {} values for an input of {} over {} members", output.numel(),
                                       input.numel(), size()));
  }
  if (size() == 1) return Pending(this, nullptr, output.copy_(input.view_as(output)), "reduce_scatter");
  RECORD_FUNCTION("group::ireduce_scatter", std::vector<c10::IValue>{input});  // named in op profiles
  return start_reduce_scatter(input, std::move(output));
}

void Group::check_reduce_scatter_rows(const at::Tensor& tensor) const {
  if (tensor.dim() == 0 || tensor.size(0) % size() != 0) {
    fail("reduce_scatter", fmt::format("dim 0 of shape {} is not divisible by {}",
                                       fmt::join(tensor.sizes(), "x"), size()));
  }
}

Group::Pending Group::start_reduce_scatter(const at::Tensor& input, at::Tensor output) {
  c10d::ReduceScatterOptions opts;
  opts.timeout = timeout_;
  const int64_t id = trace("reduce_scatter", input);
  at::Tensor in = input, out = output;  // c10d takes them mutable
  return Pending(this, start("reduce_scatter", [&] { return backend_->_reduce_scatter_base(out, in, opts); }),
                 std::move(output), "reduce_scatter", id);
}

at::Tensor Group::all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                               const std::vector<int64_t>& recv_rows) {
  if (static_cast<int>(send_rows.size()) != size() || static_cast<int>(recv_rows.size()) != size()) {
    fail("all_to_all_v", fmt::format("needs {} send and recv counts, got {} and {}", size(),
                                     send_rows.size(), recv_rows.size()));
  }
  if (input.dim() == 0 || total(send_rows) != input.size(0)) {
    fail("all_to_all_v", fmt::format("send counts add up to {} rows but the input has shape {}",
                                     total(send_rows), fmt::join(input.sizes(), "x")));
  }
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = total(recv_rows);
  if (size() == 1) return input.clone();
  RECORD_FUNCTION("group::all_to_all_v", std::vector<c10::IValue>{input});  // named in op profiles
  at::Tensor in = input.contiguous();
  at::Tensor output = at::empty(shape, input.options());
  std::vector<int64_t> out_counts = recv_rows, in_counts = send_rows;  // c10d takes them mutable
  c10d::AllToAllOptions opts;
  opts.timeout = timeout_;
  const int64_t id = trace("all_to_all_v", in);
  complete("all_to_all_v", id, [&] { return backend_->alltoall_base(output, in, out_counts, in_counts, opts); });
  return output;
}

void Group::broadcast(at::Tensor& tensor, int root) {
  if (root < 0 || root >= size()) fail("broadcast", fmt::format("bad root {}", root));
  if (size() == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  const int64_t id = trace("broadcast", tensor);
  complete("broadcast", id, [&] { return backend_->broadcast(tensors, opts); });
}

void Group::send(const at::Tensor& tensor, int dst, int tag) { isend(tensor, dst, tag).wait(); }

void Group::recv(at::Tensor& tensor, int src, int tag) {
  if (!tensor.is_contiguous()) fail("recv", "the receive buffer must be contiguous");
  irecv(tensor, src, tag).wait();
}

Group::Pending Group::isend(const at::Tensor& tensor, int dst, int tag) {
  check_peer(dst, "send");
  std::vector<at::Tensor> tensors{tensor.contiguous()};
  const int64_t id = trace("send", tensors[0], dst, tag);
  return Pending(this, start("send", [&] { return backend_->send(tensors, dst, tag); }), tensors[0], "send", id);
}

Group::Pending Group::irecv(at::Tensor buffer, int src, int tag) {
  check_peer(src, "recv");
  if (!buffer.is_contiguous()) fail("recv", "the receive buffer must be contiguous");
  std::vector<at::Tensor> tensors{buffer};
  const int64_t id = trace("recv", buffer, src, tag);
  return Pending(this, start("recv", [&] { return backend_->recv(tensors, src, tag); }), buffer, "recv", id);
}

Group::Pending Group::iall_reduce(at::Tensor tensor) {
  if (!tensor.is_contiguous()) fail("all_reduce", "the tensor must be contiguous");
  if (size() == 1) return Pending(this, nullptr, tensor, "all_reduce");
  RECORD_FUNCTION("group::iall_reduce", std::vector<c10::IValue>{tensor});  // named in op profiles
  return start_all_reduce(tensor, ReduceOp::kSum);
}

bool Group::Pending::done() const { return !work_ || work_->isCompleted(); }

at::Tensor Group::Pending::wait() {
  if (work_) group_->wait(work_, call_, trace_id_);
  work_.reset();
  return buffer_;
}

void Group::barrier() {
  if (size() == 1) return;
  c10d::BarrierOptions opts;
  opts.timeout = timeout_;
  const int64_t id = trace("barrier", at::Tensor());
  complete("barrier", id, [&] { return backend_->barrier(opts); });
}

}  // namespace hetpar
