#include "train/grad_reducer.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <stdexcept>

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
                         std::vector<std::string> names)
    : params_(std::move(params)), names_(std::move(names)), group_(group), bucket_bytes_(bucket_bytes),
      overlap_(overlap && group.size() > 1) {
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
  if (!overlap_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (torch::autograd::impl::post_acc_grad_hooks(params_[i])) {
      throw std::logic_error("parameter " + name_of(i) + " already has a post-accumulation hook");
    }
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<LandedHook>(this, i));
  }
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
// last) is summed where it lies; a bucket of several is concatenated into one
// tensor and copied back after: 16 bytes a value more, paid by small ones.
// Those copies stay alive until their sums are waited for, so at most two
// buckets' worth are kept in flight: starting a third completes the oldest
// first (on a GPU that wait only orders the streams). Without the bound, a
// backward of small parameters (high TP) would hold a copy of every gradient
// at its peak.
void GradReducer::start(Bucket& bucket) {
  bucket.started = true;
  std::vector<at::Tensor> grads;
  for (size_t i = bucket.first; i < bucket.end; ++i) {
    at::Tensor& g = params_[i].mutable_grad();
    if (!g.defined()) g = at::zeros_like(params_[i]);  // every member sends the same layout
    grads.push_back(g);
  }
  bucket.flattened = grads.size() > 1 || !grads[0].is_contiguous();
  if (!bucket.flattened) {
    bucket.sum.emplace(group_.iall_reduce(grads[0]));
    return;
  }
  std::vector<at::Tensor> flat;
  for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
  at::Tensor copy = at::cat(flat);
  copies_in_flight_ += static_cast<int64_t>(copy.nbytes());
  for (Bucket& older : buckets_) {
    if (copies_in_flight_ <= 2 * bucket_bytes_ || &older == &bucket) break;
    if (older.sum && older.flattened) complete(older);
  }
  stats_.most_copy_bytes = std::max(stats_.most_copy_bytes, copies_in_flight_);
  bucket.sum.emplace(group_.iall_reduce(copy));
}

void GradReducer::complete(Bucket& bucket) {
  const at::Tensor sum = bucket.sum->wait();
  bucket.sum.reset();
  if (!bucket.flattened) return;
  int64_t at = 0;
  for (size_t i = bucket.first; i < bucket.end; ++i) {
    at::Tensor& g = params_[i].mutable_grad();
    g.copy_(sum.narrow(0, at, g.numel()).view_as(g));
    at += g.numel();
  }
  copies_in_flight_ -= static_cast<int64_t>(sum.nbytes());
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

}  // namespace hetpar
