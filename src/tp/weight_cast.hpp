// The bf16 copies of fp32 weights that bf16 matmuls read under autocast, made
// once a step and shared by its micro-batches, with their gradients added
// straight into the fp32 weights' .grad.
//
// Autocast alone casts every weight again in each micro-batch's forward, and
// sends each micro-batch's bf16 weight gradient through a cast to fp32 and
// then an add into .grad: 6 + 12 bytes a weight. Here the cast happens once a
// step, and the gradient is one in-place fp32 += bf16 pass (10 bytes; the
// first micro-batch's is a cast, 6). The values are the same to the bit: the
// gradient is the same bf16 value added in fp32 either way.
//
// Projections that share an input (q, k, v; gate, up) run as one GEMM on one
// copy of their weights, concatenated as they are cast: no micro-batch
// concatenates them again (a copy each forward, saved until its backward: at
// two or more micro-batches a step the whole model's worth was alive at once
// when the last backward began).
//
// The weight matmuls take the copy through gemm_weight and gemm_linear
// (tp/weight_grad.hpp), whose backward adds the gradient into .grad itself
// (in fp32 on a GPU whose GEMM can); compute_weight's node, below, serves
// the biases and any other use of a copy.
//
// Each micro-batch's forward hands out the step's copy through a node of its
// own, so the gradient is added into .grad as soon as the GEMM's backward has
// it. (One node made in the first micro-batch and reused is older than every
// node of the later micro-batches; the engine runs the newest ready node
// first, so its backward waited until the end of theirs, holding every
// weight's bf16 gradient: 2 bytes a weight at the peak.)
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace hetpar {

// What a matmul on `input` should read for `weight` (or a bias): under bf16
// autocast on the input's device, the weight's bf16 copy (this step's, while a
// StepCastCache is open; a fresh one otherwise); a weight that needs no
// gradient is cast afresh each call. Outside autocast, the weight.
at::Tensor compute_weight(const at::Tensor& weight, const at::Tensor& input);

// The same for `weights` concatenated along their first dimension, for one
// GEMM; undefined outside autocast, where the matmuls read the fp32 weights
// themselves and a concatenation would be a copy (they run as separate GEMMs).
at::Tensor fused_compute_weight(const std::vector<at::Tensor>& weights, const at::Tensor& input);

// Each of `weights`' rows of `gradient` (theirs concatenated along dim 0, in
// the copy's precision) added into its fp32 .grad in place (a weight's first
// gradient of the step is a cast); frozen weights skipped.
void add_rows_into_grads(const std::vector<at::Tensor>& weights, const at::Tensor& gradient);

// What a GEMM reads for weights, with where its weight gradient goes. Under
// bf16 autocast: the step's copy, untracked (the same copy as above), and the
// trained fp32 weights whose .grad the GEMM's backward adds its gradient into
// itself (tp/weight_grad.hpp: in fp32 where the device's GEMM can); `into`
// holds every weight of a concatenated copy, in order, when any of them
// trains, and is empty when none does. Outside autocast: the weight itself,
// whose gradient autograd makes.
struct GemmWeight {
  at::Tensor value;
  std::vector<at::Tensor> into;
};
GemmWeight gemm_weight(const at::Tensor& weight, const at::Tensor& input);
// `weights` concatenated along their first dimension for one GEMM: only under
// autocast (nullopt outside it, where they run as separate GEMMs).
std::optional<GemmWeight> fused_gemm_weight(const std::vector<at::Tensor>& weights, const at::Tensor& input);

// Open for a step's micro-batches: the bf16 copies live until it closes,
// before the optimizer changes the weights in place, so no stale copy
// survives a step. Autocast itself stays off between the forwards (a backward
// must not run under it). Autocast's own cache is not kept: it only ever
// holds casts of leaves that need a gradient, and those all come here.
class StepCastCache {
 public:
  explicit StepCastCache(bool enabled);
  ~StepCastCache();
  StepCastCache(const StepCastCache&) = delete;
  StepCastCache& operator=(const StepCastCache&) = delete;

 private:
  bool enabled_;
};

}  // namespace hetpar
