#include "boundary/routing_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "parallel/rank_grid.hpp"

namespace hetpar {
namespace {

void require(bool ok, const std::string& why) {
  if (!ok) throw std::invalid_argument("boundary plan: " + why);
}

// Contiguous runs of images per encoder DP group, sizes differing by <= 1.
std::vector<int> balance_images(int images, int groups) {
  std::vector<int> owner(images);
  const int base = images / groups, extra = images % groups;
  int j = 0;
  for (int g = 0; g < groups; ++g) {
    for (int k = 0; k < base + (g < extra ? 1 : 0); ++k) owner[j++] = g;
  }
  return owner;
}

}  // namespace

int cp_rank_of_position(int64_t pos, int64_t seq_len, int cp) {
  const int64_t chunk = pos / (seq_len / (2 * cp));
  return static_cast<int>(chunk < cp ? chunk : 2 * cp - 1 - chunk);
}

BoundaryPlan plan_boundary(const ModulePlacement& p, const BoundaryBatch& batch) {
  require(p.encoder.cp == 1, "encoder cp must be 1, got " + p.encoder.to_string());
  const int samples = static_cast<int>(batch.image_starts.size());
  require(samples % p.llm.dp == 0, std::to_string(samples) + " samples do not split over llm dp " +
                                       std::to_string(p.llm.dp));
  require(batch.seq_len % (2 * p.llm.cp) == 0, "seq_len " + std::to_string(batch.seq_len) +
                                                   " is not a multiple of 2 * llm cp");
  const RankGrid encoder(p.encoder, p.encoder_ranks.offset), llm(p.llm, p.llm_ranks.offset);
  const int samples_per_group = samples / p.llm.dp;
  const int64_t chunk = batch.seq_len / (2 * p.llm.cp);
  // Under sequence parallelism each TP rank holds `part` consecutive positions of its CP rank's two chunks.
  const int parts = p.llm.sequence_parts();
  require((2 * chunk) % parts == 0,
          "seq_len " + std::to_string(batch.seq_len) + " does not split over llm cp x tp (sequence parallelism)");
  const int64_t part = 2 * chunk / parts;

  BoundaryPlan plan;
  for (int s = 0; s < samples; ++s) {
    int64_t previous_end = 0;
    for (int64_t start : batch.image_starts[s]) {
      require(start >= previous_end && start + batch.tokens_per_image <= batch.seq_len,
              "image at position " + std::to_string(start) + " of sample " + std::to_string(s) +
                  " overlaps another or leaves the sequence");
      previous_end = start + batch.tokens_per_image;
      plan.image_sample.push_back(s);
      plan.image_position.push_back(start);
    }
  }
  const int images = static_cast<int>(plan.image_sample.size());
  plan.image_encoder_dp = balance_images(images, p.encoder.dp);

  std::vector<int> first_image_of_group(p.encoder.dp, -1);
  for (int j = images - 1; j >= 0; --j) first_image_of_group[plan.image_encoder_dp[j]] = j;
  for (int j = 0; j < images; ++j) {
    const int e = plan.image_encoder_dp[j];
    const int local = j - first_image_of_group[e];
    // Rows leave the encoder's last pipeline stage and enter the LLM's first.
    const int last = p.encoder.pp - 1;
    const int sender = encoder.rank({local % p.encoder.tp, 0, e, last});
    const int d = plan.image_sample[j] / samples_per_group;
    // Split the image's rows where the sequence changes CP rank (and, under sequence parallelism, TP rank).
    for (int64_t t = 0; t < batch.tokens_per_image;) {
      const int64_t pos = plan.image_position[j] + t;
      const int cp = cp_rank_of_position(pos, batch.seq_len, p.llm.cp);
      const int64_t in_part = (pos / chunk == cp ? 0 : chunk) + pos % chunk;  // its index in the CP rank's part
      const int64_t tokens = std::min({batch.tokens_per_image - t, chunk - pos % chunk, part - in_part % part});
      const RowBlock block{j, t, tokens};
      int grad_sender = -1;
      if (parts > 1) {  // one TP rank holds these positions: it takes the rows and returns their gradient
        grad_sender = llm.rank({static_cast<int>(in_part / part), cp, d, 0});
        plan.forward[{sender, grad_sender}].push_back(block);
      } else {  // every TP rank holds them; their equal gradients come back from one
        for (int tp = 0; tp < p.llm.tp; ++tp) plan.forward[{sender, llm.rank({tp, cp, d, 0})}].push_back(block);
        grad_sender = llm.rank({j % p.llm.tp, cp, d, 0});
      }
      for (int tp = 0; tp < p.encoder.tp; ++tp) plan.backward[{grad_sender, encoder.rank({tp, 0, e, last})}].push_back(block);
      t += tokens;
    }
  }
  return plan;
}

}  // namespace hetpar
