// The boundary communicator's routing plan: which rank sends which image
// embedding rows to which rank (forward), and which rank sends their gradients
// back (backward). Every rank computes the same plan from the batch metadata
// alone, so no shapes need to be exchanged before the data.
//
// Source: image j (images numbered in sample order across the micro-batch) is
// encoded by exactly one encoder DP group, chosen to balance image counts
// (contiguous runs, sizes differing by at most one). All TP ranks of that
// group hold its rows; one of them, round-robin by image, sends them.
// Destination: sample s belongs to LLM DP group s / samples_per_group; inside
// it every TP rank needs the rows whose positions fall in its CP rank's part
// of the sequence (2*cp chunks, CP rank r holding chunks r and 2cp-1-r);
// under sequence parallelism (llm sp) only the TP rank holding the row's
// position in that part (its contiguous 1/tp) needs it.
// Backward is the adjoint: the LLM's TP ranks hold equal gradients of a row
// (replicas after their own all-reduce), so exactly one of them (round-robin
// by image) sends it, to every encoder TP rank of the source group. Summing the
// replicas instead would multiply the gradient by tp. Under sequence
// parallelism the one rank holding the row sends its gradient.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "parallel/placement.hpp"

namespace hetpar {

struct BoundaryBatch {
  int64_t seq_len = 0;           // tokens per sample
  int64_t tokens_per_image = 0;  // embedding rows per image
  // Per sample, the sequence position where each of its images starts.
  std::vector<std::vector<int64_t>> image_starts;
};

// Rows [first_token, first_token + tokens) of image `image`.
struct RowBlock {
  int image = 0;
  int64_t first_token = 0;
  int64_t tokens = 0;
  bool operator==(const RowBlock&) const = default;
};

using Transfers = std::map<std::pair<int, int>, std::vector<RowBlock>>;  // (src, dst) -> blocks, in order

struct BoundaryPlan {
  Transfers forward;   // embeddings: encoder ranks -> LLM ranks
  Transfers backward;  // gradients: LLM ranks -> encoder ranks
  std::vector<int> image_sample;         // sample of each image
  std::vector<int> image_encoder_dp;     // encoder DP group of each image
  std::vector<int64_t> image_position;   // sequence position of each image's first row
};

// Under LLM pipeline parallelism the rows go to the ranks of stage 0 (the
// embedding's), their gradients come from there.
// Rows go from the encoder's last pipeline stage to the LLM's first.
// Throws std::invalid_argument when the plan cannot be made: encoder cp
// above 1 (not supported), samples not divisible by the LLM's DP,
// seq_len not divisible by 2*cp, images overlapping or out of the sequence.
BoundaryPlan plan_boundary(const ModulePlacement& placement, const BoundaryBatch& batch);

// The CP rank holding sequence position `pos` (zigzag chunks as above).
int cp_rank_of_position(int64_t pos, int64_t seq_len, int cp);

}  // namespace hetpar
