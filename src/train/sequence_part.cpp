#include "train/sequence_part.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

#include "model/context_attention.hpp"
#include "tp/tp_comm_ops.hpp"
#include "util/host_to_device.hpp"

namespace hetpar {

MicroBatch sequence_part(const MicroBatch& batch, const Group& cp) {
  const at::Tensor host_positions = cp_positions(batch.ids.size(1), cp.rank(), cp.size());
  const at::Tensor positions = host_to_device(host_positions, batch.ids.device());
  MicroBatch part = batch;
  part.ids = batch.ids.index_select(1, positions);
  part.targets = batch.targets.index_select(1, positions);
  part.image_mask = batch.image_mask.index_select(1, positions);
  if (batch.image_mask_host.defined()) part.image_mask_host = batch.image_mask_host.index_select(1, host_positions);
  return part;
}

at::Tensor rank_positions(int64_t seq_len, int cp_rank, int cp_size, int split_rank, int split_size) {
  const at::Tensor chunks = cp_positions(seq_len, cp_rank, cp_size);
  if (split_size == 1) return chunks;
  if (chunks.size(0) % split_size != 0) {
    throw std::invalid_argument("rank_positions: " + std::to_string(chunks.size(0)) + " positions do not divide over " +
                                std::to_string(split_size) + " ranks");
  }
  const int64_t n = chunks.size(0) / split_size;
  return chunks.narrow(0, split_rank * n, n).clone();
}

at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask_host, int cp_rank, int cp_size,
                              int split_rank, int split_size) {
  if (!image_mask_host.defined() || !image_mask_host.is_cpu()) {
    throw std::logic_error("image_rows_of_part: the image mask must be the batch's host copy");
  }
  // Which rows fall in this rank's chunks is counted on the host, from the
  // batch's own copy of the mask: a masked_select on the device would wait
  // for the device to count them.
  const at::Tensor positions = rank_positions(image_mask_host.size(1), cp_rank, cp_size, split_rank, split_size);
  const at::Tensor row_of_position =
      image_mask_host.flatten().to(at::kLong).cumsum(0).sub_(1).view(image_mask_host.sizes());
  const at::Tensor mine =
      row_of_position.index_select(1, positions).masked_select(image_mask_host.index_select(1, positions));
  return rows.index_select(0, host_to_device(mine, rows.device()));
}

at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask_host, const Group& cp) {
  return image_rows_of_part(rows, image_mask_host, cp.rank(), cp.size());
}

at::Tensor own_image_rows(const at::Tensor& rows, const at::Tensor& image_mask_host, const Group& cp, Group& tp,
                          bool split) {
  if (!split || tp.size() == 1) return cp.size() > 1 ? image_rows_of_part(rows, image_mask_host, cp) : rows;
  return image_rows_of_part(identity_fwd_allreduce_bwd(rows, tp), image_mask_host, cp.rank(), cp.size(), tp.rank(),
                            tp.size());
}

}  // namespace hetpar
