#include "plan/op_times.hpp"

#include <algorithm>
#include <cmath>

#include "metrics/model_flops.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "plan/alpha_beta_fit.hpp"
#include "plan/memory_model.hpp"

namespace hetpar {
namespace {

constexpr double kFp32 = 4;  // bytes of a gradient value: gradients are reduced in fp32 on every device

struct Cost {
  double forward = 0, backward = 0;
  Cost& operator+=(const Cost& o) {
    forward += o.forward;
    backward += o.backward;
    return *this;
  }
  Cost operator*(double s) const { return {forward * s, backward * s}; }
};

// Compute that scales with the core's share; collectives as measured.
struct RankCost {
  Cost compute, comm;
  double forward() const { return compute.forward + comm.forward; }
  double backward() const { return compute.backward + comm.backward; }
};

// A matmul on `tokens` rows: forward once, backward twice (input and weight gradients).
Cost matmul(const Profile& p, double tokens, double out, double in) {
  return {p.gemm_seconds(tokens, out, in), p.gemm_backward_seconds(tokens, out, in)};
}

// A memory-bound op over `elements` values (`bytes` each: the activations'
// width unless given), read and written once; its backward the same again, twice.
Cost memory(const Profile& p, const char* op, double elements, double passes = 2, double bytes = 0) {
  const double s = p.memory_seconds(op, passes * (bytes > 0 ? bytes : p.element_bytes()) * elements);
  return {s, 2 * s};
}

// A group of `size` ranks `stride` apart, the first at `first`, on nodes of
// the profile's size (ranks fill nodes in order): 0 when it is inside one
// node, else how many of its members the first node holds.
int members_per_node(const Profile& p, int first, int stride, int size) {
  const int per_node = p.gpus_per_node();
  if (per_node <= 0 || size <= 1 || first / per_node == (first + stride * (size - 1)) / per_node) return 0;
  int members = 0;
  for (int i = 0; i < size && (first + stride * i) / per_node == first / per_node; ++i) ++members;
  return members;
}

// Bytes a micro-batch moves over the weights, at the add bandwidth: every
// gradient added into the fp32 .grad backward. In fp32 that add reads two
// values and writes one; with a bf16 profile (tp/weight_cast.hpp) each weight
// is cast to bf16 once a step (`cast_share` of it falls on a micro-batch) and
// its bf16 gradient is added straight into the fp32 .grad (a bf16 and an fp32
// value read, one written). No micro-batch copies weights otherwise: the
// fused projections read the step's concatenated copy. Where the device's
// GEMM adds into fp32 (`gemm_adds_into_fp32`, tp/weight_grad.hpp) there is no
// add: the weight-gradient GEMM reads and writes the fp32 .grad instead of
// writing a bf16 gradient, 4 + 4 - 2 bytes more than the write its rate holds.
Cost weight_traffic(const Profile& p, double weights, double cast_share) {
  const double e = p.element_bytes();
  const double cast = e < kFp32 ? cast_share * (kFp32 + e) * weights : 0;
  const double gradient = e < kFp32 && p.gemm_adds_into_fp32() ? 2 * kFp32 - e : 2 * kFp32 + e;
  return {p.memory_seconds("add", cast), p.memory_seconds("add", gradient * weights)};
}

struct LayerShape {
  double tokens;         // rows on this rank
  double hidden, heads, kv_heads, head_dim, mlp;
  int tp, cp;
  int tp_spans, cp_spans;  // members a node holds when the group crosses nodes (0: it does not)
  bool gated, causal, rope;
  double sequences, seq;  // attention: sequences of seq keys (queries split over cp)
  const char* norm;
  const char* activation;
  double cast_share = 1;  // of the weights' bf16 casts, what one micro-batch pays (see weight_traffic)
  int split = 1;          // sequence parallelism: the residual stream's ways over TP (tp, else 1)
  double residual_bytes = 4;  // a value of the residual stream (config/run_config.hpp, residual_value_bytes)
};

RankCost layer_cost(const Profile& p, const LayerShape& l) {
  RankCost c;
  const double q = l.heads * l.head_dim / l.tp, kv = l.kv_heads * l.head_dim / l.tp;
  // Projections that share an input (q, k, v; gate, up): in bf16 one GEMM on
  // the step's concatenated copy of their weights; in fp32 separate GEMMs on
  // the weights themselves, whose input gradients the backward sums (read
  // two values, write one, each). tp/parallel_linear.hpp.
  const bool fused = p.element_bytes() < kFp32;
  if (fused) {
    c.compute += matmul(p, l.tokens, q + 2 * kv, l.hidden);
    c.compute += matmul(p, l.tokens, (l.gated ? 2 : 1) * l.mlp / l.tp, l.hidden);
  } else {
    c.compute += matmul(p, l.tokens, q, l.hidden);
    c.compute += matmul(p, l.tokens, kv, l.hidden) * 2;
    c.compute += matmul(p, l.tokens, l.mlp / l.tp, l.hidden) * (l.gated ? 2 : 1);
    const double input_gradient_sums = l.gated ? 3 : 2;
    c.compute += Cost{0, input_gradient_sums * memory(p, "add", l.tokens * l.hidden, 3).forward};
  }
  c.compute += matmul(p, l.tokens, l.hidden, q);
  c.compute += matmul(p, l.tokens, l.hidden, l.mlp / l.tp);
  const double pairs = l.sequences * l.heads / l.tp;
  const bool grouped = l.kv_heads != l.heads;
  c.compute += Cost{p.attention_seconds(pairs, l.seq, l.head_dim, l.causal, false, grouped),
                    p.attention_seconds(pairs, l.seq, l.head_dim, l.causal, true, grouped)} *
               (1.0 / l.cp);
  // The elementwise work as the layer code does it (model/*.cpp), each op's
  // values read and written at the bandwidth measured for its kind, the
  // norms and the residual adds at the residual stream's width:
  const double residual = l.tokens * l.hidden / l.split;             // this rank's part of the residual stream
  c.compute += memory(p, l.norm, residual, 2, l.residual_bytes) * 2;     // two norms
  c.compute += memory(p, "add", residual, 3, l.residual_bytes) * 2;      // two residual adds
  c.compute += memory(p, l.activation, l.tokens * l.mlp / l.tp);     // the MLP's activation
  if (l.gated) c.compute += memory(p, "add", l.tokens * l.mlp / l.tp, 3);  // times the up projection
  if (l.rope) {  // q and k rotated (a product and a fused multiply-add a value); the backward rotates back
    const double rotate = memory(p, "add", l.tokens * (q + kv), 5).forward;
    c.compute += Cost{rotate, rotate};
    if (fused) c.compute += Cost{memory(p, "add", l.tokens * kv, 2).forward, 0};  // V copied out of the fused projection
  }
  // The attention's output is laid out sequence first, as the output
  // projection reads it: no copy (model/rope.hpp).
  if (l.tp > 1 && l.split == 1) {  // each TP all-reduce's input copied (two forward, two backward)
    const double copy = memory(p, "add", l.tokens * l.hidden, 2).forward;
    c.compute += Cost{2 * copy, 2 * copy};
  } else if (l.split > 1 && l.sequences > 1) {
    // Sequence parallel: each all-gather and reduce-scatter (two and two each
    // way, and the backward's two gathers of the kept parts) moves the
    // sequence first and back, a copy of its part and one of the whole
    // (tp/sequence_split.cpp); one sequence needs no move.
    const double copies = memory(p, "add", l.tokens * l.hidden + residual, 2).forward;
    c.compute += Cost{4 * copies, 6 * copies};
  }
  // The weights, every micro-batch: each gradient added into the fp32 .grad;
  // in bf16 the casts (see weight_traffic).
  const double weights = l.hidden * (2 * q + 2 * kv) + l.hidden * l.mlp / l.tp * (l.gated ? 3 : 2);
  c.compute += weight_traffic(p, weights, l.cast_share);
  // TP: the attention and MLP outputs all-reduced forward, their input
  // gradients backward (at the residual stream's width: autocast's cast of
  // the input hands the gradient back in its type). Sequence parallel: each
  // way their inputs all-gathered and their outputs reduce-scattered, the
  // same bytes at a ring's cost, and the backward gathers the kept inputs
  // again for the weights' gradients, all at the GEMMs' width.
  const double e = p.element_bytes(), activations = e * l.tokens * l.hidden;
  const double gather = p.collective_seconds("all_gather", l.tp, activations, l.tp_spans);
  const double tp = l.split > 1 ? 2 * (gather + p.collective_seconds("reduce_scatter", l.tp, activations, l.tp_spans))
                                : 2 * p.collective_seconds("all_reduce", l.tp, activations, l.tp_spans);
  const double tp_backward =
      l.split > 1 ? tp
                  : 2 * p.collective_seconds("all_reduce", l.tp, l.residual_bytes * l.tokens * l.hidden, l.tp_spans);
  const double regather = l.split > 1 ? 2 * gather : 0;
  // CP: K and V gathered forward, their gradients reduce-scattered backward.
  const double kv_bytes = 2 * e * l.tokens * l.cp * kv;
  c.comm += {tp + p.collective_seconds("all_gather", l.cp, kv_bytes, l.cp_spans),
             tp_backward + regather + p.collective_seconds("reduce_scatter", l.cp, kv_bytes, l.cp_spans)};
  return c;
}

// A module's layer as calibrated: its measured time against the compute
// layer_cost counts for it (same shape, one rank), fitted as a fixed part (the
// ops' dispatch and autograd, which TP does not shrink) plus a multiple of
// the primitives (what they miss in proportion: copies, elementwise ops,
// caches a step keeps cold), forward and backward apart. One measured shape:
// the ratio alone. None: the primitives as they are.
struct LayerFit {
  AlphaBeta forward{0, 1}, backward{0, 1};  // seconds = fixed + primitives / "bytes_per_second" (here a ratio)
};

LayerFit fit_layer(const Profile& p, const LayerShape& l, const std::string& module) {
  std::vector<std::pair<double, double>> forward, backward;  // (primitives' seconds, measured seconds)
  for (const Profile::LayerTiming& m : p.layers()) {
    if (m.module != module) continue;
    LayerShape at = l;
    at.tokens = m.sequences * m.seq, at.sequences = m.sequences, at.seq = m.seq;
    at.hidden = m.hidden, at.heads = m.heads, at.kv_heads = m.kv_heads, at.head_dim = m.hidden / m.heads;
    at.mlp = m.mlp, at.tp = 1, at.cp = 1, at.tp_spans = 0, at.cp_spans = 0, at.split = 1;
    at.cast_share = 1;  // a calibrated call casts its weights every time
    const Cost primitives = layer_cost(p, at).compute;
    forward.emplace_back(primitives.forward, m.forward_seconds);
    backward.emplace_back(primitives.backward, m.backward_seconds);
  }
  const auto fit = [](const std::vector<std::pair<double, double>>& points) {
    if (points.empty()) return AlphaBeta{0, 1};
    if (points.size() > 1) {
      try {
        return fit_alpha_beta(points);
      } catch (const std::invalid_argument&) {  // shapes too alike to tell the parts apart: the mean ratio
      }
    }
    double primitives = 0, measured = 0;
    for (const auto& [x, y] : points) primitives += x, measured += y;
    return AlphaBeta{0, primitives / measured};
  };
  return {fit(forward), fit(backward)};
}

// A layer's cost with its compute as the module's calibration fits it (collectives as measured).
RankCost calibrated_layer_cost(const Profile& p, const LayerShape& l, const std::string& module) {
  RankCost c = layer_cost(p, l);
  const LayerFit f = fit_layer(p, l, module);
  c.compute = {f.forward.seconds(c.compute.forward), f.backward.seconds(c.compute.backward)};
  // Each TP all-reduce follows about half the layer's compute (the
  // attention's half or the MLP's), over which the ranks drift apart.
  if (l.tp > 1) {
    c.comm += Cost{2 * p.collective_skew_seconds(l.tp, c.compute.forward / 2),
                   2 * p.collective_skew_seconds(l.tp, c.compute.backward / 2)};
  }
  return c;
}

// `count` layers of one cost.
RankCost stack(const RankCost& layer, int64_t count) {
  return {layer.compute * static_cast<double>(count), layer.comm * static_cast<double>(count)};
}

// A stage's `count` layers of one cost, of which the first `recomputed` run
// their forward again at the start of their backward, collectives included
// (model/recompute.hpp).
RankCost stage_stack(const RankCost& layer, int64_t count, int64_t recomputed) {
  RankCost stage = stack(layer, count);
  stage.compute.backward += layer.compute.forward * static_cast<double>(recomputed);
  stage.comm.backward += layer.comm.forward * static_cast<double>(recomputed);
  return stage;
}

// Images one encoder rank encodes per micro-batch (expected): under uniform
// placement each LLM rank its own samples' (every CP rank all of them),
// elsewhere the micro-batch's images of every LLM replica over the encoder's DP.
double images_per_encoder_rank(const RunConfig& c) {
  const double per_micro_batch = expected_images_per_step(c) / static_cast<double>(micro_batches_per_step(c));
  const int split = c.placement.placement == Placement::Uniform ? c.placement.llm.dp : c.placement.encoder.dp;
  return per_micro_batch / split;
}

}  // namespace

std::string precision_problem(const RunConfig& c, const Profile& p) {
  if (c.run.precision == "auto") return "";
  const double wanted = c.run.precision == "bf16" ? 2 : kFp32;
  if (p.element_bytes() == wanted) return "";
  return "run.precision = \"" + c.run.precision + "\", but the profile measures " +
         (p.element_bytes() < kFp32 ? "bf16 (a GPU's)" : "fp32 (a CPU's)") +
         ": its rates and widths would price another precision; predict with a profile of the run's (or \"auto\")";
}

OpEstimate estimate_ops(const RunConfig& c, const Profile& p) {
  const ModulePlacement& pl = c.placement;
  const double micro_batches = static_cast<double>(micro_batches_per_step(c));
  const double e = p.element_bytes();
  // Ranks go tp fastest, then cp, dp, pp, from each module's first rank.
  const int llm_first = pl.llm_ranks.offset, enc_first = pl.encoder_ranks.offset;
  OpEstimate out;
  OpTimes& t = out.times;
  Cost llm_compute, enc_compute;  // a micro-batch's compute on the first stage of each

  // The LLM, stage by stage.
  const LlmConfig& llm = c.llm;
  const double tokens = static_cast<double>(c.data.micro_batch_size * llm.seq_len) / pl.llm.cp;
  LayerShape llm_layer{tokens, double(llm.hidden), double(llm.heads), double(llm.kv_heads),
                             double(llm.hidden / llm.heads), double(llm.ffn_hidden), pl.llm.tp, pl.llm.cp,
                             members_per_node(p, llm_first, 1, pl.llm.tp),
                             members_per_node(p, llm_first, pl.llm.tp, pl.llm.cp),
                             /*gated=*/true, /*causal=*/true, /*rope=*/true,
                             double(c.data.micro_batch_size), double(llm.seq_len), "rms_norm", "gelu"};
  llm_layer.cast_share = 1 / micro_batches;  // trainable weights: cast once a step
  llm_layer.split = pl.llm.sequence_parts();
  llm_layer.residual_bytes = residual_value_bytes(c, p.element_bytes());
  RankCost layer = calibrated_layer_cost(p, llm_layer, "llm");
  for (int s = 0; s < pl.llm.pp; ++s) {
    const int64_t count = stage_layers(llm.layers, pl.llm.pp, s).count;
    RankCost stage = stage_stack(layer, count, recomputed_layers(c, Module::kLlm, count));
    if (s == 0) {
      // The embedding's gradient: each micro-batch's rows added into .grad in
      // place (a read of the rows' gradient and a read-modify-write of .grad's
      // rows), and the zeros of this rank's vocabulary filled once a step.
      const double table = double(llm.vocab_size) / pl.llm.tp * double(llm.hidden);
      stage.compute += Cost{0, p.memory_seconds("add", kFp32 * (table / micro_batches + 3 * tokens * double(llm.hidden)))};
    }
    if (s == pl.llm.pp - 1) {  // the head, its loss, and the vocab-parallel loss's small all-reduces
      stage.compute += matmul(p, tokens, double(llm.vocab_size) / pl.llm.tp, double(llm.hidden));
      // The loss in fp32 over this rank's logits (tp/vocab_parallel.cpp), in
      // passes over them at fp32 width. Over TP the vocab-parallel function:
      // max, shift, exp, sum and softmax forward (8), the gradient's copy and
      // scale backward (4). On one rank the library's log-softmax (4) and its
      // NLL's gradient: filled, then the log-softmax backward (5). bf16 logits
      // add a cast in and a cast back (1.5 each); bench/bench_step_ops.cpp
      // measures the two paths on the CPU at 0.71 (fp32) and 0.80 (bf16) of
      // each other, where these counts give 0.75 and 0.80.
      const double logits = tokens * double(llm.vocab_size) / pl.llm.tp;
      const double cast = e < kFp32 ? (kFp32 + e) / kFp32 : 0;
      const double loss_forward = (pl.llm.tp > 1 ? 8 : 4) + cast, loss_backward = (pl.llm.tp > 1 ? 4 : 5) + cast;
      stage.compute += Cost{p.memory_seconds("add", loss_forward * kFp32 * logits),
                            p.memory_seconds("add", loss_backward * kFp32 * logits)};
      stage.compute += weight_traffic(p, double(llm.vocab_size) / pl.llm.tp * double(llm.hidden), 1 / micro_batches);
      stage.comm += Cost{3 * p.collective_seconds("all_reduce", pl.llm.tp, kFp32 * tokens, llm_layer.tp_spans), 0};
    }
    t.llm_forward.push_back(stage.forward());
    t.llm_backward.push_back(stage.backward());
    if (s == 0) llm_compute = stage.compute;
    out.compute_seconds += micro_batches * (pl.llm.size() / pl.llm.pp) * (stage.compute.forward + stage.compute.backward);
  }

  // The encoder and projector, stage by stage: one rank's share of a micro-batch.
  const EncoderConfig& enc = c.encoder;
  const double images = images_per_encoder_rank(c);
  const double patches = static_cast<double>(enc.patches_per_image());
  LayerShape enc_layer{images * patches, double(enc.hidden), double(enc.heads), double(enc.heads),
                             double(enc.hidden / enc.heads), double(enc.mlp_hidden), pl.encoder.tp, 1,
                             members_per_node(p, enc_first, 1, pl.encoder.tp), false, /*gated=*/false,
                             /*causal=*/false, /*rope=*/false,
                             images, patches, "layer_norm", "gelu"};
  // A frozen encoder's weights need no gradient: autocast casts them again in
  // each micro-batch.
  enc_layer.cast_share = enc.frozen ? 1 : 1 / micro_batches;
  enc_layer.residual_bytes = llm_layer.residual_bytes;
  RankCost vit = calibrated_layer_cost(p, enc_layer, "encoder");
  for (int s = 0; s < pl.encoder.pp; ++s) {
    // A frozen encoder's backward is dropped below anyway.
    const int64_t count = stage_layers(enc.layers, pl.encoder.pp, s).count;
    RankCost stage = stage_stack(vit, count, recomputed_layers(c, Module::kEncoder, count));
    if (s == 0) stage.compute += matmul(p, images * patches, double(enc.hidden), double(enc.channels * enc.patch_size * enc.patch_size));
    if (enc.frozen) stage.compute.backward = stage.comm.backward = 0;  // nothing upstream trains
    if (s == pl.encoder.pp - 1) {  // the projector always trains
      const double rows = images * static_cast<double>(enc.tokens_per_image());
      stage.compute += matmul(p, rows, double(llm.hidden) / pl.encoder.tp, double(enc.hidden));
      stage.compute += matmul(p, rows, double(llm.hidden), double(llm.hidden) / pl.encoder.tp);
      stage.compute += memory(p, "gelu", rows * double(llm.hidden) / pl.encoder.tp);
      const double ar =
          p.collective_seconds("all_reduce", pl.encoder.tp, e * rows * double(llm.hidden), enc_layer.tp_spans);
      stage.comm += Cost{ar, ar};
    }
    t.encoder_forward.push_back(stage.forward());
    t.encoder_backward.push_back(stage.backward());
    if (s == 0) enc_compute = stage.compute;
    out.compute_seconds +=
        micro_batches * (pl.encoder.size() / pl.encoder.pp) * (stage.compute.forward + stage.compute.backward);
  }

  // The boundary: a micro-batch's rows, each to every LLM TP rank of its
  // replica (sequence parallel: to the one holding its position).
  const int world = pl.world_size;
  const double rows_bytes = e * expected_images_per_step(c) / static_cast<double>(micro_batches_per_step(c)) *
                            static_cast<double>(enc.tokens_per_image()) * static_cast<double>(llm.hidden);
  const int row_copies = pl.llm.tp / pl.llm.sequence_parts();
  if (pl.placement == Placement::Colocated) {
    const double per_rank = rows_bytes * row_copies / pl.world_size;
    t.boundary_forward = p.collective_seconds("all_to_all_v", world, per_rank, members_per_node(p, 0, 1, world));
    t.boundary_backward = t.boundary_forward;
    // Every rank's share of the encoder runs between the backward's exchange
    // and the next forward's, and without TP or PP the LLM's whole micro-batch
    // between the forward's and the backward's: the ranks drift apart over them.
    t.boundary_forward += p.collective_skew_seconds(world, enc_compute.forward + enc_compute.backward);
    if (pl.llm.tp == 1 && pl.llm.pp == 1) {
      t.boundary_backward += p.collective_skew_seconds(world, llm_compute.forward + llm_compute.backward);
    }
  } else if (pl.placement == Placement::NonColocated) {  // what one LLM rank receives
    const double per_rank = rows_bytes / (pl.llm.dp * pl.llm.cp) * row_copies / pl.llm.tp;
    // The two sides are on different nodes once the job outgrows one.
    const int apart = p.gpus_per_node() > 0 && world > p.gpus_per_node() ? 1 : 0;
    t.boundary_forward = p.collective_seconds("send_recv", 2, per_rank, apart);
    t.boundary_backward = t.boundary_forward;
  }
  const int stage_stride = pl.llm.size() / pl.llm.pp;
  t.stage_transfer = p.collective_seconds("send_recv", 2, llm_layer.residual_bytes * tokens * double(llm.hidden) / llm_layer.split,
                                          members_per_node(p, llm_first, stage_stride, pl.llm.pp));

  // Once a step: each module's gradients summed over its DP x CP group in
  // runtime.grad_bucket_mib buckets, the gradient norm's all-reduce, and AdamW (param,
  // grad, two moments read, three written: 7 floats a parameter) at the add
  // bandwidth. With runtime.overlap_grad_reduce every bucket but the last
  // starts during the module's last backward of the step
  // (train/grad_reducer.hpp). On a device that backward hides up to its own
  // length of the sums (the collectives run beside it on their own stream);
  // the last bucket starts as it ends and hides nothing. On CPU cores the
  // sums take the cores the backward needs: 2 ranks on 2 cores, 200M
  // parameters a rank, moved 0.4 s from the sum into the backward and left
  // the step as it was, so there the model hides nothing.
  // With optim.shard_state (a group of more than one) the buckets are
  // reduce-scattered instead, AdamW updates a 1/group share, and the updated
  // weights are all-gathered after it, bucket by bucket: nothing hides that.
  // `shards`: the module's optimizer state is sharded over `group`.
  const auto sync = [&](double parameters, int first, int stride, int group, bool shards,
                        const std::vector<double>& backward) {
    if (group <= 1) return 0.0;
    const double bytes = kFp32 * parameters;
    const double buckets = std::max(1.0, std::ceil(bytes / (c.runtime.grad_bucket_mib * (1 << 20))));
    const int spans = members_per_node(p, first, stride, group);
    const double all = buckets * p.collective_seconds(shards ? "reduce_scatter" : "all_reduce", group, bytes / buckets, spans);
    const double gather = shards ? buckets * p.collective_seconds("all_gather", group, bytes / buckets, spans) : 0;
    if (!c.runtime.overlap_grad_reduce || p.cores() > 0 || backward.empty()) return all + gather;
    const double last_backward = *std::min_element(backward.begin(), backward.end());  // the stage that hides least
    return std::max(all / buckets, all - last_backward) + gather;
  };
  const double llm_params = static_cast<double>(llm_parameters(llm)) / (pl.llm.tp * pl.llm.pp);
  const double enc_params = (static_cast<double>(enc.frozen ? 0 : encoder_parameters(enc)) +
                             static_cast<double>(projector_parameters(enc, llm))) /
                            (pl.encoder.tp * pl.encoder.pp);
  // Each module's gradients are summed over its DP x CP group (under uniform
  // placement with CP the encoder's CP ranks hold partial sums of one replica).
  const int llm_group = pl.llm.dp * pl.llm.cp, enc_group = pl.encoder.dp * pl.encoder.cp;
  const int llm_shards = optimizer_shard_group(c, llm_group), enc_shards = optimizer_shard_group(c, enc_group);
  const double llm_optimizer = p.memory_seconds("add", 7 * kFp32 * llm_params / llm_shards);
  const double enc_optimizer = p.memory_seconds("add", 7 * kFp32 * enc_params / enc_shards);
  // Under sequence parallelism the norms' gradients (two a layer, and the
  // final norm's) are summed over TP once a step in one all-reduce
  // (train/partial_grad_sum.hpp); the stage with the most layers counts.
  int64_t most_layers = 0;
  for (int s = 0; s < pl.llm.pp; ++s) most_layers = std::max(most_layers, stage_layers(llm.layers, pl.llm.pp, s).count);
  const double partial_sum = pl.llm.sequence_parts() == 1 ? 0
      : p.collective_seconds("all_reduce", pl.llm.tp, kFp32 * double(llm.hidden) * double(2 * most_layers + 1),
                             llm_layer.tp_spans);
  const double llm_side =
      sync(llm_params, llm_first, pl.llm.tp, llm_group, llm_shards > 1, t.llm_backward) + partial_sum + llm_optimizer;
  const double enc_side =
      sync(enc_params, enc_first, pl.encoder.tp, enc_group, enc_shards > 1, t.encoder_backward) + enc_optimizer;
  const double norm = p.collective_seconds("all_reduce", world, 8, members_per_node(p, 0, 1, world));
  t.per_step = norm + (pl.placement == Placement::NonColocated ? std::max(llm_side, enc_side) : llm_side + enc_side);
  out.compute_seconds += pl.llm.size() * llm_optimizer + pl.encoder.size() * enc_optimizer;
  return out;
}

OpTimes op_times(const RunConfig& config, const Profile& profile) { return estimate_ops(config, profile).times; }

namespace {

// Cores for the ranks' threads (0: a device to each rank).
double rank_cores(const RunConfig& config, const Profile& profile) {
  return static_cast<double>(profile.cores()) / static_cast<double>(config.runtime.intra_op_threads);
}

// More ranks than cores: every op runs at the calibrated shared-core
// efficiency, the critical rank's too. A waiting rank wakes for each message
// and the scheduler does not keep the busiest rank on a core of its own:
// the encoder on the first of four pipeline stages over 2 cores ran 16-18 %
// slower than predicted without this (efficiency 82 %). 1 otherwise.
double shared_core_slowdown(const RunConfig& config, const Profile& profile) {
  const double cores = rank_cores(config, profile);
  return cores > 0 && config.placement.world_size > cores ? 1.0 / profile.shared_core_efficiency() : 1.0;
}

// More ranks than cores: the step takes at least the time the cores need for
// every rank's compute; a rank that waits lends its core meanwhile, and the
// switches between ranks cost what the calibration measured.
double cores_bound(const RunConfig& config, const OpEstimate& ops, const Profile& profile) {
  const double cores = rank_cores(config, profile);
  if (cores <= 0) return 0;
  return ops.compute_seconds / cores * shared_core_slowdown(config, profile);
}

}  // namespace

double step_lower_bound(const RunConfig& config, const OpEstimate& ops, const Profile& profile) {
  return std::max(busiest_stage_seconds(config, ops.times) * shared_core_slowdown(config, profile),
                  cores_bound(config, ops, profile));
}

StepPrediction predict_step(const RunConfig& config, const OpEstimate& ops, const Profile& profile) {
  OpTimes t = ops.times;
  if (const double slowdown = shared_core_slowdown(config, profile); slowdown > 1) {
    for (std::vector<double>* stages : {&t.encoder_forward, &t.encoder_backward, &t.llm_forward, &t.llm_backward}) {
      for (double& seconds : *stages) seconds *= slowdown;
    }
    for (double* seconds : {&t.boundary_forward, &t.boundary_backward, &t.stage_transfer, &t.per_step}) {
      *seconds *= slowdown;
    }
  }
  StepPrediction step = predict_step(config, t);
  if (const double bound = cores_bound(config, ops, profile); bound > step.seconds) {
    step.phases.core_wait = bound - step.seconds;
    step.seconds = bound;
  }
  return step;
}

StepPrediction predict_step(const RunConfig& config, const Profile& profile) {
  return predict_step(config, estimate_ops(config, profile), profile);
}

}  // namespace hetpar
