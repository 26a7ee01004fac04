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

// The positions of a sequence of `seq_len` whose rows one LLM rank's layers
// hold, in order: its CP rank's chunks (cp_positions), and under sequence
// parallelism over `split_size` TP ranks its TP rank's contiguous part of
// those (tp/sequence_split.hpp). Host int64.
at::Tensor rank_positions(int64_t seq_len, int cp_rank, int cp_size, int split_rank = 0, int split_size = 1);

// Of `rows`, one per placeholder of the whole `image_mask_host` [B, S] (the
// batch's host copy) in row-major order, those at this rank's positions
// (rank_positions), in the same order (differentiable: their gradients flow
// back into `rows`). Reads nothing back from the device.
at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask_host, const Group& cp);

// Uniform placement: every LLM rank of the first stage encoded its
// micro-batch's images, and its layers keep the rows of their own positions
// (under CP its chunks; `split`, sequence parallelism over `tp`, its part of
// those). Split, TP peers keep different rows of what they all encoded, so
// the rows' gradient is summed over `tp` on its way back: the encoder's TP
// layers expect the whole gradient on every rank. Whole sequences on one CP
// rank: `rows` itself.
at::Tensor own_image_rows(const at::Tensor& rows, const at::Tensor& image_mask_host, const Group& cp, Group& tp,
                          bool split);
at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask_host, int cp_rank, int cp_size,
                              int split_rank = 0, int split_size = 1);

}  // namespace hetpar
