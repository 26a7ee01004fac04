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

double predict_step_seconds(const RunConfig& c, const OpTimes& t) {
  const Layout& encoder = c.placement.encoder;
  const Layout& llm = c.placement.llm;
  require_stages(t.encoder_forward, t.encoder_backward, encoder.pp, "encoder");
  require_stages(t.llm_forward, t.llm_backward, llm.pp, "llm");
  const int64_t micro_batches = micro_batches_per_step(c);
  StageCosts costs;
  StageOrders orders;
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
        orders = colocated_orders(c, micro_batches, costs);
      } else {  // the encoder runs with the first stage (the only one without PP)
        costs.forward[0] += encode;
        costs.backward[0] += give_back;
        orders = one_f_one_b_orders(llm.pp, micro_batches);
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
        orders.push_back(one_f_one_b(encoder_pipeline, s, micro_batches));
      }
      StageCosts llm_costs;
      add_llm_stages(t, llm_costs);
      llm_costs.forward[0] += t.boundary_forward;
      costs.forward.insert(costs.forward.end(), llm_costs.forward.begin(), llm_costs.forward.end());
      costs.backward.insert(costs.backward.end(), llm_costs.backward.begin(), llm_costs.backward.end());
      for (int s = 0; s < llm.pp; ++s) orders.push_back(one_f_one_b(llm.pp, s, micro_batches));
      break;
    }
  }
  return replay_step(orders, costs).step_time + t.per_step;
}

}  // namespace hetpar
