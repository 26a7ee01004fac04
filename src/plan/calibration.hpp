// `hetpar calibrate`: the primitives a step-time model needs, measured on
// this machine with hetpar's own kernels and process groups, as a profile
// (JSON, format "hetpar-profile/1"):
//   gemm          FLOP/s of C[M,N] = A[M,K] B[K,N] over a grid of shapes;
//   attention     forward and backward seconds of causal and bidirectional
//                 attention by sequence length and head size;
//   memory_bound  bytes/s of elementwise ops and norms by tensor size;
//   collectives   per op and group size, (bytes, seconds) points and their
//                 alpha-beta fit (latency + bytes / bandwidth); bytes are the
//                 whole tensor (all_gather's output, reduce_scatter's input,
//                 the all-reduced or exchanged buffer, the message sent);
//                 and the same in context ("in_context_" fields): each call
//                 after a few GEMMs on every rank, their time taken off.
// Every figure is the fastest of three trials: interference only adds time.
// Each section's entries name their shape, so a model interpolates in them.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "dist/runtime.hpp"

namespace hetpar {

struct CalibrationOptions {
  bool quick = false;              // a small grid (tests): seconds instead of minutes
  double seconds_per_point = 0.05; // least time of each of a point's three trials
  // Where the compute runs: the CPU in fp32 (one thread), or a GPU in bf16
  // with shapes the size of a GPU's work (each timing ends with a device sync).
  c10::Device device{c10::kCPU};
  at::ScalarType dtype() const { return device.is_cuda() ? at::kBFloat16 : at::kFloat; }
};

// Compute primitives of this process (one rank, its intra-op threads).
nlohmann::json measure_gemm(const CalibrationOptions& options);
nlohmann::json measure_attention(const CalibrationOptions& options);
nlohmann::json measure_memory_bound(const CalibrationOptions& options);
// Whole layers as the trainer runs them (model/llama.hpp's block, the
// vision encoder's), forward and backward on one rank at two shapes per
// module: what the primitives above leave out of a layer (dispatch, copies,
// elementwise ops, caches a step keeps cold) the step-time model fits as a
// fixed part plus a multiple of those primitives (plan/op_times.cpp).
// Empty on a GPU (not measured there yet).
nlohmann::json measure_layers(const CalibrationOptions& options);

// Every rank of RUNTIME calls this (on its device; NCCL on GPUs): for each group size 2, 4, ... up to the
// world (the first g ranks; the others wait), each collective the trainer
// uses at several message sizes. The result (meaningful on rank 0) is the
// "collectives" section.
nlohmann::json measure_collectives(Runtime& runtime, const CalibrationOptions& options);

// Every rank of RUNTIME calls this (CPU only): a block of a layer's kinds of
// compute timed on rank 0 alone and then on every rank at once. With more
// ranks than cores the cores switch between ranks, and each switch costs
// (caches refilled): "efficiency" is the ideal time (alone x ranks / cores,
// never less than alone) over the measured one. Meaningful on rank 0.
nlohmann::json measure_shared_cores(Runtime& runtime, int cores);

// The group sizes measured for a world of WORLD ranks: 2, 4, 8, ... and WORLD.
std::vector<int> calibration_group_sizes(int world);

}  // namespace hetpar
