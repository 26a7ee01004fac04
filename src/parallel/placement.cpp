#include "parallel/placement.hpp"

#include <algorithm>
#include <utility>

namespace hetpar {
namespace {

void check_dims(const char* module, const Layout& l) {
  for (auto [name, v] : {std::pair{"tp", l.tp}, {"cp", l.cp}, {"pp", l.pp}, {"dp", l.dp}}) {
    if (v < 1) {
      throw PlacementError(std::string(module) + " layout " + l.to_string() + ": " + name +
                           " must be >= 1");
    }
  }
}

std::string both(const Layout& encoder, const Layout& llm) {
  return "encoder " + encoder.to_string() + " (" + std::to_string(encoder.size()) +
         " ranks), llm " + llm.to_string() + " (" + std::to_string(llm.size()) + " ranks)";
}

}  // namespace

ModulePlacement resolve_placement(Placement placement, const Layout& encoder, const Layout& given_llm) {
  check_dims("encoder", encoder);
  check_dims("llm", given_llm);
  if (encoder.sp) {
    throw PlacementError("encoder layout " + encoder.to_string() +
                         ": sequence parallelism is built for the llm only; drop layout.encoder.sp");
  }
  Layout llm = given_llm;
  llm.sp = llm.sp && llm.tp > 1;  // one TP rank holds the whole sequence anyway
  ModulePlacement out;
  out.placement = placement;
  out.llm = llm;
  switch (placement) {
    case Placement::Colocated:
      if (encoder.size() != llm.size()) {
        throw PlacementError("colocated placement needs both modules on the same ranks, but " +
                             both(encoder, llm));
      }
      out.encoder = encoder;
      out.encoder_ranks = {0, encoder.size()};
      out.llm_ranks = {0, llm.size()};
      break;
    case Placement::NonColocated:
      out.encoder = encoder;
      out.encoder_ranks = {0, encoder.size()};
      out.llm_ranks = {encoder.size(), llm.size()};
      break;
    case Placement::Uniform: {
      Layout llm_whole = llm;  // the encoder's sequence is never split
      llm_whole.sp = false;
      if (!(encoder == Layout{}) && !(encoder == llm_whole)) {
        throw PlacementError("uniform placement makes the encoder inherit the llm layout, but " +
                             both(encoder, llm) + " were given; drop layout.encoder");
      }
      // Under LLM PP the encoder runs with the first stage (whose ranks come first: pp is the slowest
      // dimension), as the embedding it feeds does.
      out.encoder = llm_whole;
      out.encoder.pp = 1;
      out.encoder_ranks = {0, out.encoder.size()};
      out.llm_ranks = {0, llm.size()};
      break;
    }
  }
  // Uniform's encoder ranks are the first stage's, inside the LLM's.
  if (placement != Placement::Uniform) check_rank_ranges(out.encoder_ranks, out.llm_ranks);
  out.world_size = std::max(out.encoder_ranks.end(), out.llm_ranks.end());
  return out;
}

void check_rank_ranges(const RankRange& encoder, const RankRange& llm) {
  const bool identical = encoder == llm;
  const bool disjoint = encoder.end() <= llm.offset || llm.end() <= encoder.offset;
  if (!identical && !disjoint) {
    throw PlacementError("encoder ranks [" + std::to_string(encoder.offset) + ", " +
                         std::to_string(encoder.end()) + ") and llm ranks [" +
                         std::to_string(llm.offset) + ", " + std::to_string(llm.end()) +
                         ") overlap without being identical");
  }
}

}  // namespace hetpar
