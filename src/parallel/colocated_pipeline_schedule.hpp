// The order of a step's work on each stage when the encoder is colocated with
// a pipelined LLM. The encoder's layout spans every rank of the job, so every
// rank encodes its share of every micro-batch (E: forward, e: backward) on top
// of its stage's 1F1B forwards and backwards (F, B). Two rules tie the stages
// together: stage 0 runs F(m) only once every rank has run E(m) (it needs all
// of m's image rows), and a rank runs e(m) only after stage 0 has run B(m)
// (which gives back the rows' gradient). All ranks of a stage share its order.
//
// whole_step, the simple order: every E first, then the 1F1B, then every e.
// The encoder's activations of the whole step stay alive, and encoder work
// never overlaps the pipeline's idle time:
//
//   p = 2, m = 4, F = 1, B = 2, E = 1, e = 2           time ->
//   stage 0   E0 E1 E2 E3 F0 F1 .. B0 F2 B1 F3 B2 .. B3 e0 e1 e2 e3
//   stage 1   E0 E1 E2 E3 .. F0 B0 .. F1 B1 F2 B2 F3 B3 .. e0 e1 e2 e3
//   the step: 27 (each rank's work alone: 4 * (1 + 2 + 1 + 2) = 24)
//
// bubble_fill: at most `encoder_in_flight` micro-batches encoded but not yet
// back-propagated on a rank (bounding the encoder's activations), and encoder
// work placed where the stage would otherwise wait. The order comes from
// simulating the step with each op's expected cost: whenever a stage is free
// it runs, in this priority, (1) the E stage 0 is about to need, or, if the
// bound leaves no room for it, the oldest e whose gradient is there; (2) its
// next 1F1B op if that op's input is there; (3) the oldest e whose gradient
// is there; (4) the next E ahead of need if the bound allows; else it waits.
// Stage 1 encodes during its warm-up wait, and everything E and e can do in
// the steady state is done there, leaving one wait on each stage:
//
//   p = 2, m = 4, F = 1, B = 2, E = 1, e = 2, in flight <= 3    time ->
//   stage 0   E0 F0 E1 F1 E2 .. B0 F2 e0 E3 B1 F3 B2 e1 B3 e2 e3
//   stage 1   E0 E1 F0 E2 B0 F1 B1 e0 E3 F2 B2 F3 B3 e1 e2 e3 ..
//   the step: 25
//
// With a bound of p, stages after the first must give back e(m - p) before
// stage 0's F(m), right as stage 0 runs B(m - p): they stall it. From p + 1
// on, the simulated step is never slower than whole_step's (tested over
// stage counts, micro-batches, bounds and cost ratios).
//
// (Every op of a rank is in its order even when the rank has nothing to do
// for it, say no image of that micro-batch: the orders stay deadlock-free.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace hetpar {

enum class EncoderSchedule { kWholeStep, kBubbleFill };
EncoderSchedule parse_encoder_schedule(const std::string& name);  // "whole_step" | "bubble_fill"

// Expected seconds (or any unit) of one micro-batch's op on one rank.
struct StageCosts {
  std::vector<double> forward, backward;     // per stage: its layers' F and B
  double encoder_forward = 0, encoder_backward = 0;  // each rank's share of E and e
};

// Each stage's order for `micro_batches` micro-batches (one list per stage).
using StageOrders = std::vector<std::vector<PipelineOp>>;
StageOrders whole_step_orders(int stages, int64_t micro_batches);
StageOrders bubble_fill_orders(int64_t micro_batches, int64_t encoder_in_flight, const StageCosts& costs);

// The orders `layout.encoder_schedule` asks for, for a colocated run with
// LLM PP: whole_step, or bubble_fill with `layout.encoder_in_flight` (0:
// llm pp + 1) and `costs`.
StageOrders colocated_orders(const RunConfig& config, int64_t micro_batches, const StageCosts& costs);

// The step time of `orders` run with `costs` (each op as soon as its inputs
// and its stage allow). Orders without E and e are a plain pipeline, whose
// first stage starts at once. Throws std::logic_error when they deadlock.
struct ReplayedStep {
  double step_time = 0;
  std::vector<double> idle;  // per stage: time waiting inside [0, step_time]
};
ReplayedStep replay_step(const StageOrders& orders, const StageCosts& costs);

// The most micro-batches encoded but not yet back-propagated at any point of `order`.
int64_t encoder_micro_batches_in_flight(const std::vector<PipelineOp>& order);

}  // namespace hetpar
