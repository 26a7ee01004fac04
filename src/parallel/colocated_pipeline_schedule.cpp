#include "parallel/colocated_pipeline_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

namespace hetpar {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

// When each op of each stage ends, kNotYet until it is placed; and when an
// op's inputs from other stages are there.
class Timeline {
 public:
  // `colocated_encoder`: the orders hold every rank's encoder share (E, e),
  // which stage 0's forwards wait for; without them stage 0 starts at once.
  Timeline(int stages, int64_t micro_batches, bool colocated_encoder = true)
      : ends_(4, std::vector<std::vector<double>>(stages, std::vector<double>(micro_batches, kNotYet))),
        colocated_encoder_(colocated_encoder) {}

  double& end(int stage, const PipelineOp& op) { return ends_[op.kind][stage][op.micro]; }
  double end(int stage, PipelineOp::Kind kind, int64_t micro) const { return ends_[kind][stage][micro]; }

  double inputs_ready(int stage, const PipelineOp& op) const {
    const int last = static_cast<int>(ends_[0].size()) - 1;
    switch (op.kind) {
      case PipelineOp::kForward: {
        if (stage > 0) return end(stage - 1, PipelineOp::kForward, op.micro);
        if (!colocated_encoder_) return 0;
        double all_rows = 0;  // every rank's share of the micro-batch's image rows
        for (int s = 0; s <= last; ++s) all_rows = std::max(all_rows, end(s, PipelineOp::kEncoderForward, op.micro));
        return all_rows;
      }
      case PipelineOp::kBackward:
        return stage == last ? end(stage, PipelineOp::kForward, op.micro) : end(stage + 1, PipelineOp::kBackward, op.micro);
      case PipelineOp::kEncoderForward:
        return 0;
      case PipelineOp::kEncoderBackward:
        return std::max(end(0, PipelineOp::kBackward, op.micro), end(stage, PipelineOp::kEncoderForward, op.micro));
    }
    return kNotYet;
  }

 private:
  std::vector<std::vector<std::vector<double>>> ends_;  // [kind][stage][micro]
  bool colocated_encoder_;
};

double cost_of(const StageCosts& costs, int stage, const PipelineOp& op) {
  switch (op.kind) {
    case PipelineOp::kForward: return costs.forward[stage];
    case PipelineOp::kBackward: return costs.backward[stage];
    case PipelineOp::kEncoderForward: return costs.encoder_forward;
    case PipelineOp::kEncoderBackward: return costs.encoder_backward;
  }
  return 0;
}

int stages_of(const StageCosts& costs) {
  if (costs.forward.empty() || costs.forward.size() != costs.backward.size()) {
    throw std::invalid_argument("stage costs: one forward and one backward cost per stage are needed");
  }
  // An infinite cost would end at kNotYet: an op placed would look unplaced.
  bool finite = std::isfinite(costs.encoder_forward) && std::isfinite(costs.encoder_backward);
  for (size_t s = 0; s < costs.forward.size(); ++s) finite = finite && std::isfinite(costs.forward[s]) && std::isfinite(costs.backward[s]);
  if (!finite) throw std::invalid_argument("stage costs: a stage's cost is not a finite number of seconds");
  return static_cast<int>(costs.forward.size());
}

}  // namespace

EncoderSchedule parse_encoder_schedule(const std::string& name) {
  if (name == "whole_step") return EncoderSchedule::kWholeStep;
  if (name == "bubble_fill") return EncoderSchedule::kBubbleFill;
  throw std::invalid_argument("unknown encoder schedule \"" + name + "\" (whole_step or bubble_fill)");
}

StageOrders whole_step_orders(int stages, int64_t micro_batches) {
  StageOrders orders;
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineOp> order;
    for (int64_t m = 0; m < micro_batches; ++m) order.push_back({PipelineOp::kEncoderForward, m});
    for (const PipelineOp& op : one_f_one_b(stages, s, micro_batches)) order.push_back(op);
    for (int64_t m = 0; m < micro_batches; ++m) order.push_back({PipelineOp::kEncoderBackward, m});
    orders.push_back(std::move(order));
  }
  return orders;
}

StageOrders bubble_fill_orders(int64_t micro_batches, int64_t encoder_in_flight, const StageCosts& costs) {
  const int stages = stages_of(costs);
  // Stage 0 takes `stages` micro-batches' rows before it returns a gradient.
  if (encoder_in_flight < stages) {
    throw std::invalid_argument("bubble_fill: " + std::to_string(encoder_in_flight) +
                                " micro-batches in flight on the encoder cannot feed " + std::to_string(stages) +
                                " pipeline stages");
  }
  struct Cursor {
    std::vector<PipelineOp> pipeline;
    size_t next = 0;               // into pipeline
    int64_t encoded = 0, returned = 0;  // next E and next e
    double clock = 0;
  };
  std::vector<Cursor> cursor(stages);
  for (int s = 0; s < stages; ++s) cursor[s].pipeline = one_f_one_b(stages, s, micro_batches);
  Timeline timeline(stages, micro_batches);
  std::set<double> ends;
  StageOrders orders(stages);
  const auto done = [&](const Cursor& c) { return c.next == c.pipeline.size() && c.returned == micro_batches; };
  // Stages found waiting at their clock with nothing ending later (ops of no
  // cost): they look again once another stage places an op.
  std::vector<bool> stuck(stages, false);

  while (true) {
    int s = -1;  // the free stage that is earliest in time
    bool any_left = false;
    for (int i = 0; i < stages; ++i) {
      if (done(cursor[i])) continue;
      any_left = true;
      if (!stuck[i] && (s < 0 || cursor[i].clock < cursor[s].clock)) s = i;
    }
    if (!any_left) break;
    if (s < 0) throw std::logic_error("bubble_fill: the schedule deadlocked");
    Cursor& c = cursor[s];
    const double now = c.clock;
    int64_t stage0_next_forward = micro_batches;
    for (size_t i = cursor[0].next; i < cursor[0].pipeline.size(); ++i) {
      if (cursor[0].pipeline[i].kind == PipelineOp::kForward) {
        stage0_next_forward = cursor[0].pipeline[i].micro;
        break;
      }
    }
    const bool may_encode = c.encoded < micro_batches && c.encoded - c.returned < encoder_in_flight;
    const PipelineOp encode{PipelineOp::kEncoderForward, c.encoded};
    const PipelineOp give_back{PipelineOp::kEncoderBackward, c.returned};
    const bool pipeline_ready = c.next < c.pipeline.size() && timeline.inputs_ready(s, c.pipeline[c.next]) <= now;
    const bool give_back_ready = c.returned < c.encoded && timeline.inputs_ready(s, give_back) <= now;

    // Stage 0 is (about to be) waiting for this rank's next E.
    const bool urgent = c.encoded < micro_batches && c.encoded <= stage0_next_forward;
    PipelineOp op{};
    if (urgent && may_encode) op = encode;
    else if (urgent && give_back_ready) op = give_back;  // frees room under the bound for that E
    else if (pipeline_ready) op = c.pipeline[c.next];
    else if (give_back_ready) op = give_back;
    else if (may_encode) op = encode;  // ahead of need, into what would be idle time
    else {
      // Nothing can start now: wait for the next op to end anywhere, or for
      // a stage that is behind this one in time to place its next op.
      double later = kNotYet;
      if (auto it = ends.upper_bound(now); it != ends.end()) later = *it;
      for (int i = 0; i < stages; ++i) {
        if (!done(cursor[i]) && cursor[i].clock > now) later = std::min(later, cursor[i].clock);
      }
      if (later == kNotYet) stuck[s] = true;
      else c.clock = later;
      continue;
    }
    const double end = now + cost_of(costs, s, op);
    timeline.end(s, op) = end;
    ends.insert(end);
    c.clock = end;
    orders[s].push_back(op);
    stuck.assign(stages, false);
    if (op.kind == PipelineOp::kEncoderForward) ++c.encoded;
    else if (op.kind == PipelineOp::kEncoderBackward) ++c.returned;
    else ++c.next;
  }
  return orders;
}

StageOrders colocated_orders(const RunConfig& c, int64_t micro_batches, const StageCosts& costs) {
  const int pp = c.placement.llm.pp;
  if (parse_encoder_schedule(c.layout.encoder_schedule) == EncoderSchedule::kWholeStep) {
    return whole_step_orders(pp, micro_batches);
  }
  const int64_t in_flight = c.layout.encoder_in_flight == 0 ? pp + 1 : c.layout.encoder_in_flight;
  return bubble_fill_orders(micro_batches, in_flight, costs);
}

ReplayedStep replay_step(const StageOrders& orders, const StageCosts& costs) {
  const int stages = stages_of(costs);
  if (static_cast<int>(orders.size()) != stages) throw std::invalid_argument("replay_step: one order per stage is needed");
  int64_t micro_batches = 0;
  bool colocated_encoder = false;
  for (const auto& order : orders) {
    for (const PipelineOp& op : order) {
      micro_batches = std::max(micro_batches, op.micro + 1);
      colocated_encoder = colocated_encoder || op.kind == PipelineOp::kEncoderForward;
    }
  }
  Timeline timeline(stages, micro_batches, colocated_encoder);
  std::vector<size_t> next(stages, 0);
  std::vector<double> clock(stages, 0);
  ReplayedStep step;
  step.idle.assign(stages, 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < stages; ++s) {
      for (; next[s] < orders[s].size(); ++next[s]) {
        const PipelineOp& op = orders[s][next[s]];
        const double ready = timeline.inputs_ready(s, op);
        if (ready == kNotYet) break;
        const double start = std::max(clock[s], ready);
        step.idle[s] += start - clock[s];
        clock[s] = timeline.end(s, op) = start + cost_of(costs, s, op);
        progressed = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[s] < orders[s].size()) {
      throw std::logic_error("replay_step: the orders deadlock (stage " + std::to_string(s) + " waits at op " +
                             std::to_string(next[s]) + ")");
    }
  }
  step.step_time = *std::max_element(clock.begin(), clock.end());
  for (int s = 0; s < stages; ++s) step.idle[s] += step.step_time - clock[s];
  return step;
}

int64_t encoder_micro_batches_in_flight(const std::vector<PipelineOp>& order) {
  int64_t alive = 0, most = 0;
  for (const PipelineOp& op : order) {
    if (op.kind == PipelineOp::kEncoderForward) most = std::max(most, ++alive);
    if (op.kind == PipelineOp::kEncoderBackward) --alive;
  }
  return most;
}

}  // namespace hetpar
