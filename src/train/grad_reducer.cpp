#include "train/grad_reducer.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace hetpar {
namespace {

struct LandedHook : torch::autograd::PostAccumulateGradHook {
  LandedHook(GradReducer* reducer, size_t index) : reducer(reducer), index(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { reducer->landed(index); }
  GradReducer* reducer;
  size_t index;
};

}  // namespace

GradReducer::GradReducer(std::vector<at::Tensor> params, Group& group, int64_t bucket_bytes, bool overlap,
                         std::vector<std::string> names, bool shard)
    : params_(std::move(params)), names_(std::move(names)), group_(group), bucket_bytes_(bucket_bytes),
      overlap_(overlap && group.size() > 1), shard_(shard && group.size() > 1) {
  if (bucket_bytes <= 0) throw std::invalid_argument("a gradient bucket needs a positive size");
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t size = static_cast<int64_t>(params_[i].nbytes());
    if (buckets_.empty() || bytes + size > bucket_bytes) {
      buckets_.push_back(Bucket{i, i});
      bytes = 0;
    }
    buckets_.back().end = i + 1;
    bytes += size;
    bucket_of_.push_back(buckets_.size() - 1);
  }
  final_.assign(params_.size(), 0);
  if (shard_) build_segments();
  if (!overlap_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (torch::autograd::impl::post_acc_grad_hooks(params_[i])) {
      throw std::logic_error("parameter " + name_of(i) + " already has a post-accumulation hook");
    }
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<LandedHook>(this, i));
  }
}

// Sharded, each parameter starts at a multiple of kShardAlign values in its
// bucket and each member's range is a multiple of it: a segment then starts
// at such a multiple of its parameter's values and ends at one or at the
// parameter's end. A CPU AdamW kernel takes vector blocks from a tensor's
// first value and the rest one by one, and the two round differently: so
// aligned, each value takes the same path as in the whole parameter, and the
// update is the unsharded one's to the bit. 64 values (256 bytes in fp32) is
// a multiple of every vector width and of a GPU's alignment.
constexpr int64_t kShardAlign = 64;

void GradReducer::build_segments() {
  const int64_t members = group_.size();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].is_contiguous() || params_[i].scalar_type() != params_[0].scalar_type()) {
      throw std::logic_error("sharding the optimizer needs contiguous parameters of one type; " + name_of(i) +
                             " is not");
    }
  }
  const auto round_up = [](int64_t n, int64_t to) { return (n + to - 1) / to * to; };
  place_.assign(params_.size(), 0);
  for (Bucket& b : buckets_) {
    int64_t laid = 0;
    for (size_t i = b.first; i < b.end; ++i) {
      place_[i] = round_up(laid, kShardAlign);
      laid = place_[i] + params_[i].numel();
    }
    b.padded = round_up(laid, members * kShardAlign);
    const int64_t share = b.padded / members, lo = share * group_.rank(), hi = lo + share;
    b.kept = at::zeros({share}, params_[b.first].options());
    for (size_t i = b.first; i < b.end; ++i) {
      const int64_t at = place_[i], first = std::max(at, lo), last = std::min(at + params_[i].numel(), hi);
      if (first >= last) continue;
      segments_.push_back(Segment{i, first - at, last - first,
                                  params_[i].detach().view({-1}).narrow(0, first - at, last - first),
                                  b.kept.narrow(0, first - lo, last - first)});
    }
  }
}

std::vector<at::Tensor> GradReducer::segment_grads(const std::vector<at::Tensor>& of) const {
  std::unordered_set<const void*> wanted;
  for (const at::Tensor& p : of) wanted.insert(p.unsafeGetTensorImpl());
  std::vector<at::Tensor> grads;
  for (const Segment& s : segments_) {
    if (wanted.count(params_[s.param].unsafeGetTensorImpl()) > 0) grads.push_back(s.grad);
  }
  return grads;
}

GradReducer::~GradReducer() {
  if (!overlap_) return;
  for (const at::Tensor& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

std::string GradReducer::name_of(size_t index) const {
  return index < names_.size() ? names_[index] : fmt::format("#{}", index);
}

void GradReducer::begin_step() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_) {
    if (b.sum) throw std::logic_error("a gradient bucket of the last step was never waited for");
    b.started = false;
    b.waiting = static_cast<int64_t>(b.end - b.first);
  }
  final_.assign(params_.size(), 0);
  copies_in_flight_ = 0;
  next_to_start_ = 0;
  armed_ = false;
  stats_ = Stats{static_cast<int>(buckets_.size()), 0};
}

void GradReducer::arm() {
  const std::lock_guard<std::mutex> lock(mutex_);
  armed_ = overlap_;
}

void GradReducer::landed(size_t index) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;  // an earlier micro-batch's gradient: more will come
  Bucket& bucket = buckets_[bucket_of_[index]];
  if (bucket.started) {
    throw std::logic_error(fmt::format(
        "the gradient of {} landed after its data-parallel bucket's sum started, so the sum would leave it out: "
        "the step's schedule armed the reduction before the module's last backward on this rank "
        "(runtime.overlap_grad_reduce = false avoids it)", name_of(index)));
  }
  if (final_[index]) return;  // a second contribution in the same backward, before the bucket started
  final_[index] = 1;
  --bucket.waiting;
  start_ready_buckets();
  stats_.started_in_backward = static_cast<int>(next_to_start_);
}

void GradReducer::start_ready_buckets() {
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].waiting == 0) {
    start(buckets_[next_to_start_++]);
  }
}

// A gradient alone in its bucket (one at least the bucket's size, or the
// last) is summed where it lies (sharded: reduce-scattered from where it
// lies when its values need no padding, as a weight of a multiple of 64 x
// the group's size values does); a bucket of several is laid out in one
// tensor and copied back after (sharded: the kept share is already apart):
// 16 bytes a value more, paid by small ones. Those copies stay alive until
// their sums are waited for, so at most two buckets' worth are kept in
// flight: starting a third completes the oldest first (on a GPU that wait
// only orders the streams). Without the bound, a backward of small
// parameters (high TP) would hold a copy of every gradient at its peak.
// Sharded, every bucket counts: Gloo's reduce-scatter copies its input (its
// tensor peak with every bucket in flight at once grew by the gradients').
void GradReducer::start(Bucket& bucket) {
  bucket.started = true;
  // Sharded, a bucket whose reduce-scatter is done no longer needs its
  // unsummed gradients: dropping them as the backward goes on lowers its peak.
  for (Bucket& older : buckets_) {
    if (&older == &bucket) break;
    if (shard_ && older.sum && older.sum->done()) complete(older);
  }
  std::vector<at::Tensor> grads;
  for (size_t i = bucket.first; i < bucket.end; ++i) {
    at::Tensor& g = params_[i].mutable_grad();
    if (!g.defined()) g = at::zeros_like(params_[i]);  // every member sends the same layout
    grads.push_back(g);
  }
  bucket.flattened = grads.size() > 1 || !grads[0].is_contiguous() || (shard_ && bucket.padded != grads[0].numel());
  if (!bucket.flattened) {
    bucket.copy = grads[0].view({-1});  // held until the sum is done
  } else if (shard_) {
    bucket.copy = at::empty({bucket.padded}, grads[0].options());
    int64_t laid = 0;  // the gaps the alignment leaves are zeros
    for (size_t i = bucket.first; i < bucket.end; ++i) {
      const at::Tensor& g = grads[i - bucket.first];
      if (place_[i] > laid) bucket.copy.narrow(0, laid, place_[i] - laid).zero_();
      bucket.copy.narrow(0, place_[i], g.numel()).copy_(g.reshape({-1}));
      laid = place_[i] + g.numel();
    }
    if (bucket.padded > laid) bucket.copy.narrow(0, laid, bucket.padded - laid).zero_();
  } else {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
    bucket.copy = at::cat(flat);
  }
  // A reduce-scatter on Gloo copies its input: a sharded bucket costs a copy either way.
  bucket.counted = bucket.flattened || shard_;
  if (bucket.counted) {
    copies_in_flight_ += static_cast<int64_t>(bucket.copy.nbytes());
    for (Bucket& older : buckets_) {
      if (copies_in_flight_ <= 2 * bucket_bytes_ || &older == &bucket) break;
      if (older.sum && older.counted) complete(older);
    }
    stats_.most_copy_bytes = std::max(stats_.most_copy_bytes, copies_in_flight_);
  }
  if (shard_) {
    bucket.sum.emplace(group_.ireduce_scatter(bucket.copy, bucket.kept));
  } else {
    bucket.sum.emplace(group_.iall_reduce(bucket.flattened ? bucket.copy : grads[0]));
  }
}

void GradReducer::complete(Bucket& bucket) {
  bucket.sum->wait();
  bucket.sum.reset();
  int64_t at = 0;
  for (size_t i = bucket.first; i < bucket.end; ++i) {
    at::Tensor& g = params_[i].mutable_grad();
    if (shard_) {
      g.reset();  // its sum's part this member needs is in `kept`
    } else if (bucket.flattened) {
      g.copy_(bucket.copy.narrow(0, at, g.numel()).view_as(g));
      at += g.numel();
    }
  }
  if (bucket.counted) copies_in_flight_ -= static_cast<int64_t>(bucket.copy.nbytes());
  bucket.copy.reset();
}

void GradReducer::finish() {
  const std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  if (group_.size() == 1) return;
  while (next_to_start_ < buckets_.size()) start(buckets_[next_to_start_++]);
  for (Bucket& bucket : buckets_) {
    if (bucket.sum) complete(bucket);
  }
}

void GradReducer::gather_params() {
  std::vector<at::Tensor> pieces, outs;
  for (const Segment& s : segments_) pieces.push_back(s.values);
  for (const at::Tensor& p : params_) outs.push_back(p.detach());
  gather(pieces, outs);
}

// Bucket by bucket: this member's pieces laid out as its range of the bucket
// (gaps zero), all-gathered, then cut into the parameters.
void GradReducer::gather(const std::vector<at::Tensor>& pieces, const std::vector<at::Tensor>& outs) const {
  if (!shard_) throw std::logic_error("GradReducer::gather needs a sharded reducer");
  if (pieces.size() != segments_.size() || outs.size() != params_.size()) {
    throw std::logic_error(fmt::format("gather: {} pieces and {} outputs for {} segments and {} parameters",
                                       pieces.size(), outs.size(), segments_.size(), params_.size()));
  }
  at::NoGradGuard no_grad;
  size_t next = 0;  // segments come bucket by bucket, in parameter order
  for (const Bucket& b : buckets_) {
    const int64_t share = b.padded / group_.size(), lo = share * group_.rank();
    at::Tensor mine = at::zeros({share}, pieces.empty() ? b.kept.options() : pieces[0].options());
    for (; next < segments_.size() && bucket_of_[segments_[next].param] == static_cast<size_t>(&b - buckets_.data());
         ++next) {
      const Segment& s = segments_[next];
      mine.narrow(0, place_[s.param] + s.offset - lo, s.length).copy_(pieces[next].reshape({-1}));
    }
    // A parameter filling its bucket exactly is gathered straight into its output.
    at::Tensor first = outs[b.first];
    if (b.end - b.first == 1 && b.padded == first.numel() && first.is_contiguous() && first.device() == mine.device()) {
      group_.all_gather_into(first.view({-1}), mine);
      continue;
    }
    const at::Tensor all = group_.all_gather(mine);
    for (size_t i = b.first; i < b.end; ++i) {
      at::Tensor out = outs[i];
      out.copy_(all.narrow(0, place_[i], params_[i].numel()).view(out.sizes()));
    }
  }
}

}  // namespace hetpar
