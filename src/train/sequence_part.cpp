#include "train/sequence_part.hpp"

#include <ATen/ATen.h>

#include "model/context_attention.hpp"
#include "util/host_to_device.hpp"

namespace hetpar {
namespace {

at::Tensor positions_of(const at::Tensor& per_position, const Group& cp) {
  return host_to_device(cp_positions(per_position.size(1), cp.rank(), cp.size()), per_position.device());
}

}  // namespace

MicroBatch sequence_part(const MicroBatch& batch, const Group& cp) {
  const at::Tensor positions = positions_of(batch.ids, cp);
  MicroBatch part = batch;
  part.ids = batch.ids.index_select(1, positions);
  part.targets = batch.targets.index_select(1, positions);
  part.image_mask = batch.image_mask.index_select(1, positions);
  return part;
}

at::Tensor image_rows_of_part(const at::Tensor& rows, const at::Tensor& image_mask, const Group& cp) {
  const at::Tensor positions = positions_of(image_mask, cp);
  const at::Tensor row_of_position = image_mask.flatten().to(at::kLong).cumsum(0).sub_(1).view(image_mask.sizes());
  const at::Tensor mine = row_of_position.index_select(1, positions).masked_select(image_mask.index_select(1, positions));
  return rows.index_select(0, mine);
}

}  // namespace hetpar
