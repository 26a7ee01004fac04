// The sum of one module's gradients over its data-parallel (x CP) group, in
// buckets started while the step's last backward is still running.
//
// Buckets hold consecutive parameters of a list in the order their gradients
// are expected to become final (the reverse of the forward's), at most
// `bucket_bytes` each (a parameter larger than that alone). With overlap on,
// a schedule arms the reducer just before the module's last backward of the
// step on this rank (the last micro-batch's); from then on each parameter's
// gradient is final once it lands in .grad (autograd's post-accumulation
// hook; the nodes that add into .grad themselves return no gradient, and the
// weight's accumulation node still runs after them and calls the hook), and
// a bucket starts as soon as all of its gradients are final and every bucket
// before it has started — the same order on every member, as NCCL needs.
// finish() starts what is left (a gradient never produced becomes zeros:
// every member sends the same layout) and waits for all of it.
//
//   last backward of the step            time ->
//   compute   head  layer 3  layer 2  layer 1  embedding | finish
//   buckets         [0: head, l3]--->  [1: l2, l1]------>  [2: emb]--> wait
//
// A gradient that lands after its bucket started would be left out of the
// sum: it is an error naming the parameter, not a wrong number. With overlap
// off (or before arming) nothing starts before finish(): the buckets and so
// the sums are the same to the bit either way.
//
// Sharded (`optim.shard_state`, a group of more than one): each bucket is
// laid out flat (each parameter at a multiple of 64 values, the whole a
// multiple of 64 x the group's size: the .cpp says why) and reduce-scattered
// instead, so member r keeps values [r*S, (r+1)*S) of the bucket's sum (S =
// the padded size over the group's). A parameter's values in that range are
// its segment on this member: the optimizer updates only those (views of the
// parameter, with views of the kept sum as their gradients), and
// gather_params() then all-gathers every bucket so that each member holds
// every updated value again. The unsummed .grad of a bucket is dropped once
// its reduce-scatter is done.
//
//   bucket of 3 parameters, 2 members:  [ a a a a a | b b b | c c ] + gaps
//   member 0 keeps (and updates)         [ a a a a a | b ]
//   member 1                                             [ b b | c c ]
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "dist/group.hpp"

namespace hetpar {

class GradReducer {
 public:
  struct Stats {
    int buckets = 0;
    int started_in_backward = 0;  // before finish(), this step
    int64_t most_copy_bytes = 0;  // concatenated buckets' copies alive at once, at most
  };

  // `params` in bucket order; `names` (same length, or empty) name them in errors.
  GradReducer(std::vector<at::Tensor> params, Group& group, int64_t bucket_bytes, bool overlap,
              std::vector<std::string> names = {}, bool shard = false);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before a step's micro-batches: nothing final, nothing started.
  void begin_step();
  // Just before the backward that gives each parameter its last gradient of
  // the step on this rank. No effect with overlap off or a group of one.
  void arm();
  // After the step's backwards: every bucket summed into the gradients.
  void finish();
  Stats last_step() const { return stats_; }

  // From the accumulation hooks: parameter `index`'s gradient landed.
  void landed(size_t index);

  const std::vector<at::Tensor>& params() const { return params_; }
  Group& group() const { return group_; }
  // True when sharding was asked for and the group has more than one member.
  bool sharded() const { return shard_; }
  // Sharded: the part of a parameter this member keeps the sum of and updates
  // (at most one a parameter, since a member's range is contiguous).
  struct Segment {
    size_t param = 0;                // index into params()
    int64_t offset = 0, length = 0;  // in the parameter's flattened values
    at::Tensor values, grad;         // views: of the parameter, of its bucket's kept sum
  };
  const std::vector<Segment>& segments() const { return segments_; }
  // The gradients of the segments whose parameter is one of `of`, in segments() order.
  std::vector<at::Tensor> segment_grads(const std::vector<at::Tensor>& of) const;
  // Sharded, after the update: every member's segments into every member's parameters.
  void gather_params();
  // Sharded: `pieces` (one a segment, of its length) gathered from every
  // member into `outs` (one a parameter, of its shape); a collective.
  void gather(const std::vector<at::Tensor>& pieces, const std::vector<at::Tensor>& outs) const;

 private:
  struct Bucket {
    size_t first = 0, end = 0;  // parameters [first, end)
    int64_t waiting = 0;        // gradients not yet final this step
    bool started = false;       // this step (its sum may be done already)
    std::optional<Group::Pending> sum;
    bool flattened = false;     // the sum runs on a concatenated copy
    bool counted = false;       // its input counts against the copies in flight
    int64_t padded = 0;         // sharded: its values laid out aligned and padded (.cpp)
    at::Tensor copy;            // the concatenated copy in flight (sharded: kept until its sum is done)
    at::Tensor kept;            // sharded: this member's part of the sum, padded / group size values
  };
  void build_segments();
  void start(Bucket& bucket);
  void complete(Bucket& bucket);  // waits for its sum (and copies it back)
  void start_ready_buckets();
  std::string name_of(size_t index) const;

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<size_t> bucket_of_;  // by parameter
  std::vector<char> final_;        // by parameter, this step
  std::vector<Bucket> buckets_;
  size_t next_to_start_ = 0;
  Group& group_;
  int64_t bucket_bytes_;
  int64_t copies_in_flight_ = 0;  // bytes of concatenated buckets not yet waited for
  bool overlap_;
  bool shard_;
  std::vector<Segment> segments_;
  std::vector<int64_t> place_;  // sharded: each parameter's first value in its bucket's layout
  bool armed_ = false;
  Stats stats_;
  std::mutex mutex_;  // landings come from the autograd engine's device threads
};

}  // namespace hetpar
