// The loss of batches that no step trains on: `hetpar eval`'s batch file, and
// a training run's held-out batches every run.eval_every steps. Each batch
// runs as one step of the layout's own schedule, forward only: no graph is
// kept, no gradient is made or reduced, and the optimizer does not run.
#pragma once

#include <cstdint>

#include "config/run_config.hpp"
#include "data/batch_source.hpp"
#include "dist/module_groups.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

struct ForwardOnlyLoss {
  double loss = 0;            // the mean over every target token
  int64_t target_tokens = 0;  // how many there were
};

// The mean over the target tokens of steps 1..`batches` of `data` (a global
// batch each), on every rank alike. A collective over `world`.
ForwardOnlyLoss forward_only_loss(MultimodalModel& model, const BatchSource& data, const RunConfig& config, JobGroups& groups,
                         Group& world, int64_t batches);

}  // namespace hetpar
