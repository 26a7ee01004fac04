#include "plan/step_model.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "parallel/colocated_pipeline_schedule.hpp"

namespace hetpar {
namespace {

void require_stages(const std::vector<double>& forward, const std::vector<double>& backward, int stages,
                    const char* module) {
  if (static_cast<int>(forward.size()) != stages || static_cast<int>(backward.size()) != stages) {
    throw std::invalid_argument(std::string("step model: the ") + module + " needs one forward and one backward time "
                                "per pipeline stage (" + std::to_string(stages) + ")");
  }
}

// The LLM's stages, each receiving from the stage before it and the gradient
// from the stage after it.
void add_llm_stages(const OpTimes& t, StageCosts& costs) {
  const size_t stages = t.llm_forward.size();
  for (size_t s = 0; s < stages; ++s) {
    costs.forward.push_back(t.llm_forward[s] + (s > 0 ? t.stage_transfer : 0));
    costs.backward.push_back(t.llm_backward[s] + (s + 1 < stages ? t.stage_transfer : 0));
  }
}

StageOrders one_f_one_b_orders(int stages, int64_t micro_batches) {
  StageOrders orders;
  for (int s = 0; s < stages; ++s) orders.push_back(one_f_one_b(stages, s, micro_batches));
  return orders;
}

}  // namespace

double StepPhases::total() const {
  return encoder_forward + encoder_backward + llm_forward + llm_backward + boundary + pipeline_wait +
         gradient_sync_and_optimizer + core_wait;
}

namespace {

// A step of `micro_batches` simulated: when it ends, how long each stage
// waited, and each stage's work by phase.
struct Simulated {
  ReplayedStep replayed;
  std::vector<std::string> names;
  std::vector<StepPhases> busy;
};

// Without `replay`, only each stage's work (no orders, no timeline).
Simulated simulate(const RunConfig& c, const OpTimes& t, int64_t micro_batches, bool replay = true) {
  const Layout& encoder = c.placement.encoder;
  const Layout& llm = c.placement.llm;
  const double m = static_cast<double>(micro_batches);
  StageCosts costs;
  StageOrders orders;
  std::vector<std::string> names;
  std::vector<StepPhases> busy;  // per simulated stage, a step's work by phase
  const auto llm_phases = [&](int s, bool encodes, bool colocated) {
    StepPhases p;
    p.llm_forward = m * (t.llm_forward[s] + (s > 0 ? t.stage_transfer : 0));
    p.llm_backward = m * (t.llm_backward[s] + (s + 1 < llm.pp ? t.stage_transfer : 0));
    if (encodes) {
      p.encoder_forward = m * t.encoder_forward[0];
      p.encoder_backward = m * t.encoder_backward[0];
      if (colocated) p.boundary = m * (t.boundary_forward + t.boundary_backward);
    }
    return p;
  };
  switch (c.placement.placement) {
    case Placement::Uniform:
    case Placement::Colocated: {
      const bool colocated = c.placement.placement == Placement::Colocated;
      const double encode = t.encoder_forward[0] + (colocated ? t.boundary_forward : 0);
      const double give_back = t.encoder_backward[0] + (colocated ? t.boundary_backward : 0);
      add_llm_stages(t, costs);
      if (colocated && llm.pp > 1) {  // every rank's share placed among its stage's ops
        costs.encoder_forward = encode;
        costs.encoder_backward = give_back;
        if (replay) orders = colocated_orders(c, micro_batches, costs);
      } else {  // the encoder runs with the first stage (the only one without PP)
        costs.forward[0] += encode;
        costs.backward[0] += give_back;
        if (replay) orders = one_f_one_b_orders(llm.pp, micro_batches);
      }
      for (int s = 0; s < llm.pp; ++s) {
        names.push_back((s == 0 || colocated ? "encoder + " : "") + std::string("llm stage ") + std::to_string(s));
        busy.push_back(llm_phases(s, s == 0 || colocated, colocated));
      }
      break;
    }
    case Placement::NonColocated: {
      // One pipeline: the encoder's stages, then the LLM's. The encoder's
      // last stage is run_ahead ahead: 1F1B as if the LLM were run_ahead - 1 stages.
      const int64_t ahead = std::min<int64_t>(c.layout.run_ahead, micro_batches);
      const int encoder_pipeline = encoder.pp + static_cast<int>(ahead) - 1;
      for (int s = 0; s < encoder.pp; ++s) {
        const bool last = s == encoder.pp - 1;
        costs.forward.push_back(t.encoder_forward[s] + (s > 0 ? t.stage_transfer : 0));
        costs.backward.push_back(t.encoder_backward[s] + (last ? t.boundary_backward : t.stage_transfer));
        if (replay) orders.push_back(one_f_one_b(encoder_pipeline, s, micro_batches));
        names.push_back("encoder stage " + std::to_string(s));
        StepPhases p;
        p.encoder_forward = m * costs.forward.back();
        p.encoder_backward = m * (t.encoder_backward[s] + (last ? 0 : t.stage_transfer));
        p.boundary = last ? m * t.boundary_backward : 0;
        busy.push_back(p);
      }
      StageCosts llm_costs;
      add_llm_stages(t, llm_costs);
      llm_costs.forward[0] += t.boundary_forward;
      costs.forward.insert(costs.forward.end(), llm_costs.forward.begin(), llm_costs.forward.end());
      costs.backward.insert(costs.backward.end(), llm_costs.backward.begin(), llm_costs.backward.end());
      for (int s = 0; s < llm.pp; ++s) {
        if (replay) orders.push_back(one_f_one_b(llm.pp, s, micro_batches));
        names.push_back("llm stage " + std::to_string(s));
        StepPhases p = llm_phases(s, false, false);
        if (s == 0) p.boundary = m * t.boundary_forward;
        busy.push_back(p);
      }
      break;
    }
  }
  return {replay ? replay_step(orders, costs) : ReplayedStep{}, names, busy};
}

// Simulated exactly up to this many micro-batches a step; beyond, the step
// grows by the same time each micro-batch (the pipeline's steady state), so
// two simulations of fewer give the line it follows.
constexpr int64_t kSimulatedMicroBatches = 64;

}  // namespace

double busiest_stage_seconds(const RunConfig& c, const OpTimes& t) {
  require_stages(t.encoder_forward, t.encoder_backward, c.placement.encoder.pp, "encoder");
  require_stages(t.llm_forward, t.llm_backward, c.placement.llm.pp, "llm");
  const Simulated work = simulate(c, t, micro_batches_per_step(c), /*replay=*/false);
  double busiest = 0;
  for (const StepPhases& p : work.busy) busiest = std::max(busiest, p.total());
  return busiest + t.per_step;
}

StepPrediction predict_step(const RunConfig& c, const OpTimes& t) {
  require_stages(t.encoder_forward, t.encoder_backward, c.placement.encoder.pp, "encoder");
  require_stages(t.llm_forward, t.llm_backward, c.placement.llm.pp, "llm");
  const int64_t m = micro_batches_per_step(c);
  const int stages = c.placement.llm.pp + c.placement.encoder.pp;
  const int64_t a = std::max<int64_t>({kSimulatedMicroBatches / 2, 4 * stages, c.layout.run_ahead});
  const int64_t b = a + kSimulatedMicroBatches / 4;
  const bool exact = m <= b;
  const Simulated run = simulate(c, t, exact ? m : b);
  double step_time = run.replayed.step_time;
  if (!exact) {
    const double at_a = simulate(c, t, a).replayed.step_time;
    step_time = at_a + static_cast<double>(m - a) * (step_time - at_a) / static_cast<double>(b - a);
  }
  // Extrapolated, no stage can do its work in less than the work itself.
  const double scale = exact ? 1.0 : static_cast<double>(m) / static_cast<double>(b);
  for (const StepPhases& work : run.busy) step_time = std::max(step_time, scale * work.total());
  // The critical rank: the stage that waits least; its work is linear in the micro-batches.
  const auto& idle = run.replayed.idle;
  const size_t critical = static_cast<size_t>(std::min_element(idle.begin(), idle.end()) - idle.begin());
  StepPrediction out;
  out.seconds = step_time + t.per_step;
  out.critical = run.names.at(critical);
  StepPhases p = run.busy.at(critical);
  for (double* phase : {&p.encoder_forward, &p.encoder_backward, &p.llm_forward, &p.llm_backward, &p.boundary}) {
    *phase *= scale;
  }
  p.pipeline_wait = std::max(0.0, step_time - (p.total() - p.pipeline_wait));
  p.gradient_sync_and_optimizer = t.per_step;
  out.phases = p;
  return out;
}

}  // namespace hetpar
