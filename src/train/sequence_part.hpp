// What one rank of the LLM's context-parallel group works on: its two chunks
// of every sequence (model/context_attention.hpp), and the image rows whose
// positions fall in them.
#pragma once

#include <ATen/core/Tensor.h>

#include "data/batch_source.hpp"
#include "dist/group.hpp"

namespace hetpar {

// ids, targets and image_mask at this rank's positions (pixels untouched).
// The targets stay the next tokens of the whole sequence, so the loss over
// the CP ranks' parts is the loss over the whole.
MicroBatch sequence_part(const MicroBatch& batch, const Group& cp);

// Of `rows`, one per placeholder of the whole `image_mask_host` [B, S] (the
// batch's host copy) in row-major order, those at this rank's positions, in
// the same order (differentiable: their gradients flow back into `rows`).
// Reads nothing back from the device.
at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask_host, const Group& cp);
at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask_host, int cp_rank, int cp_size);

}  // namespace hetpar
