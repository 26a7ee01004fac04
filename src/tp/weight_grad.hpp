// Linear layers on the step's bf16 weight copies (tp/weight_cast.hpp) whose
// backward adds each weight's gradient into the fp32 weight's .grad itself.
//
// Through the copy's own node (compute_weight) the weight-gradient GEMM
// writes a bf16 gradient that a second pass adds into the fp32 .grad: 2
// bytes written, then 2 + 4 read and 4 written, a weight and micro-batch.
// Here, on a GPU whose GEMM takes an fp32 addend with bf16 operands, the GEMM
// adds its product into .grad in fp32 as it writes it (4 read, 4 written),
// and no bf16 rounding of a micro-batch's gradient is summed into the step's.
// Which LibTorch releases accept an fp32 addend beside bf16 operands differs
// (some check that the addend has the operands' type), so the device is
// asked once, with a small product whose every value is known; where it
// refuses or errs, and on the CPU (whose GEMMs have no such form), the
// product is made in bf16 and added as before.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "tp/weight_cast.hpp"

namespace hetpar {

// Whether this LibTorch has the GEMM forms that write fp32 from bf16
// operands (aten::mm.dtype, aten::addmm.dtype_out), looked up by name, so
// that a release without them builds all the same (and answers no below).
bool libtorch_has_fp32_output_gemms();

// Whether `device`'s GEMM adds a bf16 product into an fp32 matrix in place
// and writes an fp32 product, each exactly as the fp32 product of the bf16
// values would be. Asked once a device (a few small GEMMs and one read, so
// ask before a step, as the trainer does: a step must not wait on the host);
// a refusal is a no, as on the CPU, whose LibTorch has no such GEMM.
bool gemm_adds_into_fp32(const at::Device& device);

// y = x · wᵀ (+ bias) for a GEMM's weight (a bias from compute_weight, or
// undefined). When `w` is a copy of trained weights, the backward adds each
// one's rows of the weight gradient into its .grad and returns none for them.
at::Tensor gemm_linear(const at::Tensor& x, const GemmWeight& w, const at::Tensor& bias = {});

// For backward code that makes a copy's weight gradient itself: `into`'s .grad
// += its rows of grad_rowsᵀ · input_rows (grad_rows [tokens, Σ rows],
// input_rows [tokens, in], both in the copy's precision); frozen ones skipped.
void add_weight_gradients(const std::vector<at::Tensor>& into, const at::Tensor& grad_rows, const at::Tensor& input_rows);

}  // namespace hetpar
