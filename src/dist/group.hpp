// A process group: the one interface every hetpar collective goes through, so
// the same call sequence runs on Gloo (CPU, CI) and NCCL (GPU). All calls are
// blocking and bounded by the group's timeout; a failure throws
// CollectiveError naming the group, the call and the rank.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetpar {

class CommTrace;

class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ReduceOp { kSum, kMax, kMin };

class Group {
 public:
  // `ranks`: job ranks of the members, ascending; `backend` may be null only
  // for a group of one (every call is then local).
  Group(std::string name, std::vector<int> ranks, int job_rank,
        c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }  // this process's rank inside the group
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }

  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // Concatenates every member's tensor (all the same shape) along dim 0.
  at::Tensor all_gather(const at::Tensor& tensor);
  // The same into `output` (contiguous, size() times `input`'s values).
  void all_gather_into(at::Tensor output, const at::Tensor& input);
  // Sums across members, then member i keeps rows [i*n/size, (i+1)*n/size).
  at::Tensor reduce_scatter(const at::Tensor& tensor);
  // Sends rows [sum(send_rows[:j]), +send_rows[j]) of `input` to member j and
  // returns the rows received, member by member: sum(recv_rows) rows.
  at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                          const std::vector<int64_t>& recv_rows);
  void broadcast(at::Tensor& tensor, int root);   // root: rank inside the group
  void send(const at::Tensor& tensor, int dst, int tag = 0);
  void recv(at::Tensor& tensor, int src, int tag = 0);

  // A send or receive in flight, so a rank can compute while its messages
  // move (the non-colocated encoder runs ahead this way). The buffer lives
  // until wait(), which is bounded by the group's timeout.
  class Pending {
   public:
    Pending(const Group* group, c10::intrusive_ptr<c10d::Work> work, at::Tensor buffer, const char* call,
            int64_t trace_id = -1)
        : group_(group), work_(std::move(work)), buffer_(std::move(buffer)), call_(call), trace_id_(trace_id) {}
    at::Tensor wait();  // the buffer: for a receive, the data received
    bool done() const;  // finished already (never blocks)
   private:
    const Group* group_;
    c10::intrusive_ptr<c10d::Work> work_;
    at::Tensor buffer_;
    const char* call_;
    int64_t trace_id_;  // the op's index in the communication trace, -1 when off
  };
  Pending isend(const at::Tensor& tensor, int dst, int tag);
  // A sum over the members, in place in `tensor` (contiguous), started now and
  // finished by wait(): a data-parallel bucket reduced while the backward goes on.
  Pending iall_reduce(at::Tensor tensor);
  // reduce_scatter started now into `output` (this member's rows of the sum,
  // returned by wait()). `input` (contiguous, dim 0 divisible by the size)
  // must live until then: a bucket's sum whose shard of the sum this member keeps.
  Pending ireduce_scatter(const at::Tensor& input, at::Tensor output);
  Pending irecv(at::Tensor buffer, int src, int tag);
  void barrier();

 private:
  // Starts a call on the backend: a peer already gone can make the start
  // itself throw (a closed socket), which is a collective error like a failed wait.
  c10::intrusive_ptr<c10d::Work> start(const char* call, const std::function<c10::intrusive_ptr<c10d::Work>()>& post) const;
  // Posts an all-reduce of `tensor` in place (both all_reduce and iall_reduce).
  Pending start_all_reduce(const at::Tensor& tensor, ReduceOp op);
  // Posts a reduce-scatter of `input` (contiguous) into `output` (both reduce_scatter and ireduce_scatter).
  Pending start_reduce_scatter(const at::Tensor& input, at::Tensor output);
  void check_reduce_scatter_rows(const at::Tensor& tensor) const;
  // Starts a call and waits for it.
  void complete(const char* call, int64_t trace_id, const std::function<c10::intrusive_ptr<c10d::Work>()>& post) const;
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* call, int64_t trace_id) const;
  // Records a call in the communication trace (dist/comm_trace.hpp); -1 when off.
  int64_t trace(const char* kind, const at::Tensor& tensor, int peer = -1, int tag = 0) const;
  void check_peer(int peer, const char* call) const;
  [[noreturn]] void fail(const char* call, const std::string& why) const;

  std::string name_;
  std::vector<int> ranks_;
  int rank_ = 0;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::chrono::milliseconds timeout_;
  CommTrace* trace_ = nullptr;  // null unless tracing is on
};

}  // namespace hetpar
