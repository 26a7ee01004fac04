// The order in which one rank runs a step's micro-batches, forward and
// backward, for each placement (gradients accumulate in the model; the
// optimizer step comes after):
// - uniform and colocated: micro-batch by micro-batch, encoder fwd ->
//   boundary -> LLM fwd/bwd -> boundary bwd -> encoder bwd on every rank;
// - non-colocated: the encoder ranks run up to `layout.run_ahead`
//   micro-batches ahead of the LLM ranks, posting rows without waiting and
//   doing each backward as its gradients come back, so the LLM need not wait
//   for the encoder (1F1B across the boundary);
// - LLM pipeline parallelism: 1F1B over the LLM's stages, the encoder
//   feeding the first stage (step_schedule_pipeline.cpp); colocated, every
//   rank's share of the encoder placed among its stage's 1F1B ops
//   (step_schedule_colocated_pipeline.cpp).
// The backward is staged at the module boundaries (same math as one backward
// pass) so each phase is timed on its own. Forward only (evaluation), every
// schedule runs its forwards in the same order and nothing else: no graph
// is kept, no gradient is sent back, and each micro-batch's state is dropped
// once its forward is done.
#pragma once

#include "boundary/boundary_exchange.hpp"
#include "data/batch_source.hpp"
#include "dist/module_groups.hpp"
#include "metrics/phase_timer.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/grad_reducer.hpp"
#include "train/multimodal_model.hpp"

namespace hetpar {

// Each module's gradient sum over its DP x CP group on this rank
// (train/grad_reducer.hpp); null where it has none to do.
struct StepReductions {
  GradReducer* encoder = nullptr;
  GradReducer* llm = nullptr;
};

struct StepContext {
  MultimodalModel& model;
  const BatchSource& data;
  const RunConfig& config;
  JobGroups& groups;
  Group& world;
  PhaseTimer& timer;
  int64_t step = 0;
  int64_t micro_batches = 0;
  double target_tokens = 0;  // the loss divisor: target tokens of the whole step
  StepReductions reductions = {};
  bool forward_only = false;  // evaluation: the forwards and the loss, no backward
};

// A schedule's ops for this step: all of them, or (forward only) its
// forwards in the same order. Dropping every backward op on every rank keeps
// the schedule deadlock-free: no forward waits on a backward.
std::vector<PipelineOp> ops_to_run(const StepContext& ctx, std::vector<PipelineOp> ops);

// Every schedule calls these just before a module's backward of micro-batch
// `micro`. Each runs a module's backwards in micro-batch order, so the last
// micro-batch's is the module's last of the step on this rank: its reduction
// is armed then, and starts buckets as their gradients land. It is the same
// point of the schedule on every rank, which keeps every rank's collectives
// in one order across communicators (and on a communicator two groups
// share): an encoder replica with no images in the last micro-batch starts
// its buckets in finish(), where a replica with images would have started
// them last in its backward, so the order is the same. Arming at each
// replica's own last micro-batch with images would not keep it.
void before_llm_backward(const StepContext& ctx, int64_t micro);
void before_encoder_backward(const StepContext& ctx, int64_t micro);

// Returns this rank's share of the step's loss (the LLM's TP rank 0 of each
// replica reports its samples; every other rank 0) as a scalar tensor: it is
// summed where it was computed and read once per step, so no micro-batch
// waits on the device.
at::Tensor run_micro_batches(const StepContext& ctx);

// The non-colocated schedule (step_schedule_noncolocated.cpp).
at::Tensor run_noncolocated_micro_batches(const StepContext& ctx);
// Colocated with LLM PP (step_schedule_colocated_pipeline.cpp).
at::Tensor run_colocated_pipeline(const StepContext& ctx);

// Point-to-point traffic: each channel's data and its gradients have a
// communicator of their own (p2p_group), so that under NCCL, where a pair's
// messages on one communicator run in issue order and tags are ignored, no
// direction waits behind another. Tags still tell micro-batches apart on
// Gloo and let the order checker (dist/nccl_order_check.hpp) see that NCCL's
// in-order pairing is the intended one: a range per channel, a micro-batch's
// data at 2m above its base, its gradient at 2m + 1.
enum class Channel : int { kBoundary = 0, kLlmStages = 1 << 24, kEncoderStages = 1 << 25 };
inline int data_tag(Channel channel, int64_t micro) { return static_cast<int>(channel) + static_cast<int>(2 * micro); }
inline int gradient_tag(Channel channel, int64_t micro) { return data_tag(channel, micro) + 1; }
// The communicator of a channel's data (gradient false) or gradients; its
// member i is job rank i, as on the world group.
Group& p2p_group(const StepContext& ctx, Channel channel, bool gradient);
// The boundary channel's two communicators, for a BoundaryExchange.
BoundaryLinks boundary_links(const StepContext& ctx);

// The job rank `step` pipeline stages on from this rank of `module` (its
// other coordinates the same): where a stage sends on and receives from.
int stage_peer(const ModuleGroups& module, int step);

// Where the LLM's first pipeline stage gets each micro-batch's image rows and
// gives back their gradients: the encoder on its own ranks (uniform) or the
// boundary's point-to-point halves (train/boundary_rows.hpp: non-colocated,
// and colocated beside a pipelined LLM).
class ImageRows {
 public:
  virtual ~ImageRows() = default;
  virtual bool needs_pixels() const = 0;  // the micro-batch must carry its images
  // Micro-batch `micro`'s rows at this rank's positions (`whole`: its whole
  // sequences), as a stage input whose gradient the LLM's backward fills.
  virtual at::Tensor forward(int64_t micro, const MicroBatch& whole) = 0;
  // After the stage's backward of `micro`: the rows' gradient goes back.
  virtual void backward(int64_t micro) = 0;
  // At the end of the step: waits for what is still in flight.
  virtual void finish() {}
};

// The LLM pipeline on an LLM rank (step_schedule_pipeline.cpp); `stage0_rows`
// is used on the first stage's ranks only.
at::Tensor run_llm_pipeline(const StepContext& ctx, ImageRows* stage0_rows);
// Uniform placement with LLM PP: the encoder runs with the first stage.
at::Tensor run_uniform_pipeline(const StepContext& ctx);

// LLM forward and backward (forward only: no backward) of this rank's `batch` of micro-batch `micro`
// (whole sequences; under LLM CP it takes its part), its image rows given by
// `rows` (those of its part; a stage input: the gradient stays in
// rows.grad()). Returns this rank's share of the loss, detached (0 off the
// LLM's TP rank 0).
at::Tensor llm_forward_backward(const StepContext& ctx, int64_t micro, const MicroBatch& batch, const at::Tensor& rows);

// The gradient a stage input received, or zeros where none flowed to it.
at::Tensor grad_or_zeros(const at::Tensor& stage_input);

// Backward through `output` with `grad` where there is a graph to go through
// (an empty leaf or a frozen result has none).
void backward_if_graph(const at::Tensor& output, const at::Tensor& grad);

}  // namespace hetpar
