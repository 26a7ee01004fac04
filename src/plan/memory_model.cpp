#include "plan/memory_model.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "metrics/model_flops.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/rank_parts.hpp"

namespace hetpar {
namespace {

constexpr double kFp32 = 4;

struct Part {
  double state = 0, activations = 0, transient = 0, unmade_gradients = 0;
  int64_t in_flight = 0;
};

// Whether a module holding `in_flight` micro-batches runs all the step's
// forwards before its first backward: its gradients are then not made yet
// at its activations' peak (RankMemory::unmade_gradients).
bool every_forward_first(const RunConfig& c, int64_t in_flight) { return in_flight >= micro_batches_per_step(c); }

// Bytes a transformer layer saves for its backward, per token on a rank of
// tensor-parallel size `tp` (the inputs of column-parallel matmuls are
// whole, or under sequence parallelism this rank's part; everything between
// the two matmuls of a block is split), with activations `eb` bytes wide:
// - the two norms: their inputs, which are the residual stream (`rb` bytes a
//   value: fp32 under autocast, where the embedding and the weights are fp32
//   and an add promotes, unless run.fp32_residual = false makes it bf16), a
//   float a row for their scale (model/norms.hpp keeps no normalised copy),
//   and their outputs at the next matmul's width;
// - the rotated queries and keys, the values and the attention's output (RoPE
//   saves only its tables and writes sequence first, so the output projection
//   reads the kernel's output as a view; a fused q/k/v projection hands V out
//   as a copy, so the projection's own output is freed), a float a row and
//   head for the log-sum-exp; CP adds the other ranks' gathered keys and
//   values; the MLP's gate, up, activation and product;
// - where grouped-query attention takes an unfused kernel (the profile
//   says), its probabilities over every key, in fp32.
// Measured on one CPU rank with the counting allocator (hidden 512, 8 heads,
// kv 4 heads of 64, ffn 1536, seq 256; the peak's growth with micro-batch
// size and layers together, 2 to 6 and 4 to 8): 38952 B a token and layer in
// fp32, 21544 in bf16, exactly this.
// A norm over `h` values a token: its input (`rb` bytes a value), `row_floats`
// floats a row (scale; and mean for a layer norm) and its output at the next
// matmul's width.
// Under sequence parallelism (`split` ways, else 1) a rank normalises its
// part of the sequence, and the matmul keeps that part too (gathering it
// again in its backward: tp/parallel_linear.cpp).
double norm_bytes_per_token(double h, double row_floats, double eb, double rb, int split = 1) {
  return (h * rb + row_floats * kFp32 + h * eb) / split;
}

double llm_bytes_per_token(const LlmConfig& l, const Layout& lay, bool keeps_probabilities, double eb, double rb) {
  const int tp = lay.tp, cp = lay.cp;
  const double h = double(l.hidden), kv = double(l.kv_heads) * double(l.hidden / l.heads), f = double(l.ffn_hidden);
  const double norms = 2 * norm_bytes_per_token(h, 1, eb, rb, lay.sequence_parts());
  const double split = (2 * h + 2 * kv + 2 * kv * (cp - 1) + 4 * f) * eb + double(l.heads) * kFp32;
  const double probabilities = keeps_probabilities && l.kv_heads != l.heads ? double(l.heads) * double(l.seq_len) * kFp32 : 0;
  return norms + (split + probabilities) / tp;
}
// The encoder's layer per patch: two layer norms (residual-width inputs, as
// above, with a float each for the row's mean and scale; outputs at matmul
// width), q, k, v and the attention's output with its log-sum-exp, the MLP's
// hidden and its activation.
double encoder_bytes_per_patch(const EncoderConfig& e, int tp, double eb, double rb) {
  const double h = double(e.hidden), m = double(e.mlp_hidden);
  return 2 * norm_bytes_per_token(h, 2, eb, rb) + ((4 * h + 2 * m) * eb + double(e.heads) * kFp32) / tp;
}

// The step's compute-precision copies of the weights the matmuls read
// (tp/weight_cast.hpp), bytes a trainable weight: kept from the first forward
// to the last backward, so they count with the state. In fp32 the matmuls
// read the weights themselves. A one-rank bf16 run (hidden 1024, 3 to 9
// layers, the C library's heap returning what is freed) grew by 18.0 bytes a
// parameter at one micro-batch a step and 18.3 at two and four.
double step_copy_bytes(const MemoryAssumptions& a) { return a.element_bytes < kFp32 ? a.element_bytes : 0; }

// The data-parallel gradient buckets' copies alive while a stage's first
// layer runs again in the step's last backward (train/grad_reducer.hpp):
// with overlap on, the buckets of the gradients made above it (`above`
// bytes on this rank) have started, and at most two buckets' copies are
// kept in flight. Without recompute each layer's kept work is freed before
// its gradients' bucket starts, more than the copies.
double bucket_copies_bytes(const RunConfig& c, int sum_group, double above) {
  if (sum_group <= 1 || !c.runtime.overlap_grad_reduce) return 0;
  return std::min(2 * c.runtime.grad_bucket_mib * double(1 << 20), above);
}

// What a stage's recompute holds beyond its saved activations, at its
// height, its `layers` layers' first `recomputed` running again:
// - `top`, in every backward: the top recomputed layer's work again and
//   three residual-width tensors (`residual` bytes each: the recomputed
//   output, the gradient coming in and the one going out), less the work of
//   the kept layers above it, whose backward ran first and freed it;
// - `bottom`, in the step's last backward: the first layer's, the same with
//   the bucket copies (`copies`) alive, less the inputs the recomputed layers
//   above it kept; the other micro-batches' activations are freed by then
//   (part_transient subtracts them).
// Measured with a 2-rank DP LLM (tests/test_memory_measured.cpp,
// activations_dp2_recompute): 19 MiB over the run without DP, where 31 MiB
// of copies are alive and 12 MiB of inputs freed.
struct RecomputeMoments {
  double top = 0, bottom = 0;
};
RecomputeMoments recompute_moments(double layer_bytes, double residual, int64_t layers, int64_t recomputed, double copies) {
  const double top = layer_bytes * double(1 - (layers - recomputed)) + 3 * residual;
  return {top, top - double(recomputed - 1) * residual + copies};
}

// A stage's backward moments, each beyond its state less the gradients not
// made yet (`p.unmade_gradients`) and its saved activations:
// - `first`: in the step's first backward, every micro-batch in flight still
//   saved, counting the gradients made before it where none was made before
//   that backward;
// - `last`: in the step's last backward, counting neither the gradients nor
//   the other micro-batches' activations (freed by then);
// - `bottom`: the first layer's recompute in the step's last backward, the
//   same way.
// Where the part's every forward comes first and the step has more than one
// micro-batch, the earlier backwards have made all its gradients by its last
// one: with a tenth of the activations recomputing (a 2-stage pipeline, tiny
// at hidden 512), the first stage's peak comes there, 53 MiB over a model
// that counted none. With one micro-batch the last backward is the first,
// and its bottom layer comes after every gradient but its own and the
// embeddings' (`bottom_gradients`).
struct BackwardMoments {
  double first = 0, last = 0;
  std::optional<double> bottom;  // none without recompute
};
double part_transient(const Part& p, const BackwardMoments& m, int64_t micro_batches, double bottom_gradients) {
  const double others = double(p.in_flight - 1) * p.activations / double(p.in_flight);
  const double later = std::max(m.last, m.bottom.value_or(0));
  double most = m.first;
  if (p.unmade_gradients == 0) {
    most = std::max(most, later - others);
  } else if (micro_batches > 1) {
    most = std::max(most, later + p.unmade_gradients - others);
  } else if (m.bottom) {
    most = std::max(most, *m.bottom + p.unmade_gradients - bottom_gradients);
  }
  return std::max(0.0, most);
}

// What a stage's backward holds beyond its saved activations at its fullest
// moments past the loss. Measured by which tensors were alive at the tensor peak
// against those alive when the backward began (one to two CPU ranks, hidden
// 512, ffn 1536 and 3072, 2048 tokens, fp32 and bf16):
// - the top layer's MLP (every stage): gradients of its hidden values, in
//   fp32 two a hidden unit (the product's and its two factors', less the
//   product, freed by the down projection's backward), in bf16 three (the
//   fused gate and up projection's gradient and a factor's, at that
//   projection's backward, with its input's gradient and a weight's bf16
//   gradient, none where the GEMM adds into the fp32 .grad itself); the
//   residual stream's gradient coming in; with the top layer recomputed,
//   its work made again; less the final norm's kept input and
//   output on the last stage (`final_norm` bytes: the head's and the norm's
//   backwards freed them);
// - under sequence parallelism, the head's backward on the last stage: its
//   input's gradient over the whole sequence, the input gathered again, the
//   gradient's and the kept part's sequence parts, the head's weight
//   gradient, and a copy of the gradient where the backend's reduce-scatter
//   copies its input (Gloo);
// - where RMSNorm's backward runs as separate ops (the CPU,
//   model/norms.hpp), the final norm's on the last stage: three fp32 values
//   a token and hidden unit in fp32 (the incoming gradient, the normalised
//   input, a product), four in bf16 (the gradient's fp32 copy too).
// Where the stage's gradients are not made before its backward
// (`gradients_unmade`), each moment also holds those made before it: the
// head's (last stage) and, at the MLP, the final norm's and the down
// projection's.
struct BackwardShape {
  double tokens, hidden, ffn_local, vocab_local, residual, final_norm, recomputed_top_layer;
  int tp, split;
  bool last, gradients_unmade;
};
double backward_transient(const BackwardShape& b, const MemoryAssumptions& a) {
  const double eb = a.element_bytes, t = b.tokens, h = b.hidden, f = b.ffn_local;
  const bool low = eb < kFp32;
  const double head_grad = b.gradients_unmade && b.last ? b.vocab_local * h * kFp32 : 0;
  const double mlp_made = b.gradients_unmade ? head_grad + (b.last ? h * kFp32 : 0) + f * h * kFp32 : 0;
  const double weight_grad = a.gemm_adds_into_fp32 ? 0 : h * f * eb;
  const double hidden_grads = t * f * eb * (low ? 3 : 2) + (low ? t * h * eb + weight_grad : 0);
  double most = b.recomputed_top_layer + b.residual + hidden_grads - b.final_norm + mlp_made;
  if (b.last && b.split > 1) {
    const double whole = t * h * eb * (2 + (a.reduce_scatter_copies_input ? 1 : 0));
    most = std::max(most, whole + 2 * t * h * eb / b.tp + b.vocab_local * h * eb + head_grad);
  }
  if (b.last && a.norm_backward_unfused) most = std::max(most, (low ? 4 : 3) * t * h * kFp32 / b.split + head_grad);
  return std::max(0.0, most);
}

// The LLM's stage `s` on one rank: its layers' state, its activations for
// `in_flight` micro-batches, and on the last stage the logits.
Part llm_part(const RunConfig& c, int s, int64_t in_flight, const MemoryAssumptions& a) {
  const LlmConfig& l = c.llm;
  const Layout& lay = c.placement.llm;
  const double h = double(l.hidden), vocab = double(l.vocab_size);
  const double blocks = double(llm_parameters(l)) - 2 * vocab * h - h;  // less embedding, head, final norm
  const StageLayers layers = stage_layers(l.layers, lay.pp, s);
  double params = blocks * double(layers.count) / double(l.layers);
  if (s == 0) params += vocab * h;
  const bool last = s == lay.pp - 1;
  if (last) params += vocab * h + h;
  const double tokens = double(c.data.micro_batch_size) * double(l.seq_len) / lay.cp;
  Part p;
  p.state = parameter_state_bytes(params / lay.tp, true, optimizer_shard_group(c, lay.dp * lay.cp));
  const bool unmade = every_forward_first(c, in_flight);
  if (unmade) p.unmade_gradients = step_gradient_bytes(params / lay.tp, true);
  const double read_by_matmuls = params - (s == 0 ? vocab * h : 0);  // all but the embedding table
  p.state += step_copy_bytes(a) * read_by_matmuls / lay.tp;
  p.in_flight = in_flight;
  const double rb = residual_value_bytes(c, a.element_bytes);
  const double layer_bytes = tokens * llm_bytes_per_token(l, lay, a.attention_keeps_probabilities, a.element_bytes, rb);
  // Recomputed, a layer keeps its input (the residual stream, whole on
  // every TP rank, or its part under sequence parallelism) and makes its work
  // again, one layer and micro-batch at a
  // time, in the backward (recompute_transient). tiny.toml at hidden 512 and
  // 2048 tokens a micro-batch (the activation-heavy case of
  // tests/test_memory_measured.cpp) measured 355.2 MiB in fp32 and 336.9 in
  // bf16 against 346.0 and 337.3 predicted. Under run.recompute_layers only
  // the stage's first layers recompute; the rest keep their work.
  const int64_t recomputed = recomputed_layers(c, Module::kLlm, layers.count);
  const double residual = tokens * h * rb / lay.sequence_parts();
  p.activations = double(in_flight) * (double(recomputed) * residual + double(layers.count - recomputed) * layer_bytes);
  // The final norm, whose output the head reads.
  if (last) {
    p.activations += double(in_flight) * tokens * norm_bytes_per_token(h, 1, a.element_bytes, rb, lay.sequence_parts());
  }
  // The logits at fp32 width, this rank's vocab shard, in as many copies as
  // the loss holds at its peak (tp/vocab_parallel.cpp). Over TP the
  // vocab-parallel function: the logits and three copies (probabilities kept
  // for the backward, the gradient and its input's). On one rank the
  // library's log-softmax keeps its output, and the backward holds it with
  // the NLL's gradient and its own: three. A one-rank run of tiny.toml with
  // a 32000 vocabulary and 2048 tokens a micro-batch measured one copy less
  // (250 MiB) after the change to the library's function, in fp32 and bf16.
  // In bf16 over TP the function takes an fp32 copy of the bf16 logits the
  // head made, which are still held: half a copy more.
  const double logits_copies = lay.tp > 1 ? 4 + (a.element_bytes < kFp32 ? 0.5 : 0) : 3;
  BackwardMoments moments;
  if (last) moments.first = logits_copies * kFp32 * tokens * vocab / lay.tp;
  // The loss's copies are gone before the layers' backward begins.
  BackwardShape backward{tokens, h, double(l.ffn_hidden) / lay.tp, vocab / lay.tp, residual, 0,
                         recomputed == layers.count ? layer_bytes : 0, lay.tp, lay.sequence_parts(), last, unmade};
  if (last) backward.final_norm = tokens * norm_bytes_per_token(h, 1, a.element_bytes, rb, lay.sequence_parts());
  moments.first = std::max(moments.first, backward_transient(backward, a));
  backward.gradients_unmade = false;
  moments.last = backward_transient(backward, a);
  // fp32 gradient bytes of the stage's bottom layer and embeddings, and of a layer.
  const double layer_gradients = blocks / double(l.layers) / lay.tp * kFp32;
  const double bottom_gradients = layer_gradients + (s == 0 ? vocab * h / lay.tp * kFp32 : 0);
  if (recomputed > 0) {
    const double copies = bucket_copies_bytes(c, lay.dp * lay.cp, params / lay.tp * kFp32 - bottom_gradients);
    const RecomputeMoments r = recompute_moments(layer_bytes, residual, layers.count, recomputed, copies);
    // In the first backward the kept layers above and the head have made their gradients.
    const double made_above = unmade ? double(layers.count - recomputed) * layer_gradients +
                                           (last ? (vocab * h + h) / lay.tp * kFp32 : 0)
                                     : 0;
    moments.first = std::max(moments.first, r.top + made_above);
    moments.last = std::max(moments.last, r.top);
    moments.bottom = r.bottom;
  }
  p.transient = part_transient(p, moments, micro_batches_per_step(c), bottom_gradients);
  return p;
}

// The encoder's stage `s` on one rank, for `images` images a micro-batch.
// Non-colocated, the last stage sends its rows to the LLM's ranks itself
// (train/encoder_stage.cpp): it keeps each micro-batch's output for the
// backward and a copy in the rows' send order until the gradient comes
// back, two LLM-wide rows a token beyond the projector's own; its backward
// receives the rows' gradient (a buffer, then the rows in order) and, at
// the projector's output weight, makes that weight's gradient and its
// input's. Without these the one-rank encoder of
// tests/test_memory_measured.cpp (LLM hidden 512, 12 images a micro-batch)
// read 9 % (fp32) and 16 % (bf16) under.
Part encoder_part(const RunConfig& c, int s, int64_t in_flight, double images, const MemoryAssumptions& a,
                  bool sends_rows) {
  const EncoderConfig& e = c.encoder;
  const Layout& lay = c.placement.encoder;
  const double h = double(e.hidden), patches = double(e.patches_per_image());
  const double embedding = double(e.channels * e.patch_size * e.patch_size) * h + h + patches * h;
  const double blocks = double(encoder_parameters(e)) - embedding;
  const StageLayers layers = stage_layers(e.layers, lay.pp, s);
  const bool first = s == 0, last = s == lay.pp - 1;
  Part p;
  const double params = (blocks * double(layers.count) / double(e.layers) + (first ? embedding : 0)) / lay.tp;
  p.state = parameter_state_bytes(params, !e.frozen, optimizer_shard_group(c, lay.dp * lay.cp));
  if (every_forward_first(c, in_flight)) {
    p.unmade_gradients = step_gradient_bytes(params, !e.frozen);
  }
  if (!e.frozen) p.state += step_copy_bytes(a) * params;  // a frozen weight is cast afresh at each use
  const double eb = a.element_bytes, rb = residual_value_bytes(c, a.element_bytes);
  const double layer_bytes = patches * encoder_bytes_per_patch(e, lay.tp, eb, rb);
  // Recomputed: each layer's input, and one layer's work again in its backward (as the LLM's).
  const int64_t recomputed = e.frozen ? 0 : recomputed_layers(c, Module::kEncoder, layers.count);
  double bytes = double(recomputed) * patches * h * rb + double(layers.count - recomputed) * layer_bytes;
  if (first) bytes += patches * double(e.channels * e.patch_size * e.patch_size) * eb;  // the patches themselves
  // The projector, on the last stage, which always trains: its input, hidden and activation.
  const double projector = last ? double(projector_parameters(e, c.llm)) / lay.tp : 0;
  const double projector_bytes = double(e.tokens_per_image()) * (h + 2 * double(c.llm.hidden) / lay.tp) * eb;
  if (last) {
    p.state += parameter_state_bytes(projector, true, optimizer_shard_group(c, lay.dp * lay.cp)) + step_copy_bytes(a) * projector;
    if (every_forward_first(c, in_flight)) {
      p.unmade_gradients += step_gradient_bytes(projector, true);
    }
    bytes += projector_bytes;
  }
  const double row_bytes = double(e.tokens_per_image()) * double(c.llm.hidden) * eb;  // an image's rows at the boundary
  const bool sends = last && sends_rows;
  // A frozen encoder saves nothing below its projector: no backward runs through it.
  if (e.frozen) bytes = last ? projector_bytes : 0;
  if (sends) bytes += 2 * row_bytes;
  p.in_flight = in_flight;
  p.activations = double(in_flight) * images * bytes;
  BackwardMoments moments;
  // fp32 gradient bytes of the stage's bottom layer and embeddings, and of a layer.
  const double layer_gradients = e.frozen ? 0 : blocks / double(e.layers) / lay.tp * kFp32;
  const double bottom_gradients = e.frozen ? 0 : layer_gradients + (first ? embedding / lay.tp * kFp32 : 0);
  if (sends) {
    // Receiving the gradient: its buffer and the rows in order. Then, its own
    // send done and freed, the projector's output weight's new gradient
    // (fp32, and first in bf16) beside the gradient and its input's.
    const double weight = double(c.llm.hidden) * double(c.llm.hidden) / lay.tp;
    const double low_copy = eb < kFp32 && !a.gemm_adds_into_fp32 ? weight * eb : 0;
    const double rows = images * row_bytes;
    moments.first = std::max(2 * rows, rows + low_copy + weight * kFp32);
    moments.last = moments.first;
  }
  if (!e.frozen) {
    // The top layer's MLP backward: the residual stream's gradient
    // and its hidden values' (one in fp32; in bf16 two, the activation's
    // and its input's), the projector's saved rows and this micro-batch's
    // send copy freed by then; where no gradient was made before, the
    // projector's and the output weight's made. An encoder as wide as the
    // LLM (hidden 512, mlp 2048, 768 patches a micro-batch) read -1.7 %
    // (fp32) and -2.1 % (bf16) without it.
    const double tokens = images * patches, f = double(e.mlp_hidden) / lay.tp;
    const double freed = last ? images * (projector_bytes + (sends ? row_bytes : 0)) : 0;
    const double mlp = tokens * h * rb + tokens * f * eb * (eb < kFp32 ? 2 : 1) - freed;
    const double made = p.unmade_gradients > 0
                            ? (h * f + h + projector) * kFp32
                            : 0;
    moments.first = std::max(moments.first, mlp + made);
    moments.last = std::max(moments.last, mlp);
  }
  if (recomputed > 0) {
    // This rank's share of the stage and projector, less its first layer and the embeddings.
    const double trained = params + projector;
    const double copies = bucket_copies_bytes(c, lay.dp * lay.cp, trained * kFp32 - bottom_gradients);
    const RecomputeMoments r =
        recompute_moments(images * layer_bytes, images * patches * h * rb, layers.count, recomputed, copies);
    // In the first backward the kept layers above and the projector have made their gradients.
    const double made_above =
        p.unmade_gradients > 0 ? double(layers.count - recomputed) * layer_gradients + projector * kFp32 : 0;
    moments.first = std::max(moments.first, r.top + made_above);
    moments.last = std::max(moments.last, r.top);
    moments.bottom = r.bottom;
  }
  p.transient = part_transient(p, moments, micro_batches_per_step(c), bottom_gradients);
  return p;
}

// Images one encoder rank encodes in the fullest micro-batch: every sample at its most.
double images_per_encoder_rank(const RunConfig& c) {
  const double per_replica = double(c.data.micro_batch_size * most_images_per_sample(c));
  if (c.placement.placement == Placement::Uniform) return per_replica;  // each LLM rank its own samples
  return per_replica * c.placement.llm.dp / c.placement.encoder.dp;
}

// The ranks of `part` holding module parts `a` and, colocated or uniform, `b`.
RankMemory rank_of(const RankPart& part, const Part& a, const Part* b, double reserved) {
  RankMemory r;
  r.what = part.what;
  r.ranks = static_cast<int>(part.ranks.size());
  r.state = a.state + (b ? b->state : 0);
  r.activations = a.activations + (b ? b->activations : 0);
  r.transient = std::max(a.transient, b ? b->transient : 0);  // the two modules' backwards do not overlap
  r.unmade_gradients = a.unmade_gradients + (b ? b->unmade_gradients : 0);
  r.reserved = reserved;
  r.micro_batches_in_flight = std::max(a.in_flight, b ? b->in_flight : 0);
  return r;
}

}  // namespace

int64_t most_images_per_sample(const RunConfig& c) {
  return std::min(c.data.images_max, c.data.files_most_images.value_or(c.data.images_max));
}

MemoryAssumptions memory_assumptions(const Profile& profile) {
  return {profile.element_bytes(), profile.reserved_bytes(), profile.attention_keeps_probabilities(),
          profile.norm_backward_unfused(), profile.reduce_scatter_copies_input(), profile.gemm_adds_into_fp32()};
}

std::vector<RankMemory> rank_memory(const RunConfig& c, const MemoryAssumptions& a) {
  const ModulePlacement& pl = c.placement;
  const int64_t m = micro_batches_per_step(c);
  const int pp = pl.llm.pp;
  // 1F1B: stage s holds the activations of pp - s micro-batches at its peak.
  const auto llm_in_flight = [&](int s) { return pp > 1 ? std::min<int64_t>(m, pp - s) : 1; };
  const double images = images_per_encoder_rank(c);
  // One entry a part, in the order and with the names the trainer reports them (parallel/rank_parts.hpp).
  const std::vector<RankPart> parts = rank_parts(pl);
  std::vector<RankMemory> out;
  const auto add = [&](const Part& first, const Part* second) {
    out.push_back(rank_of(parts.at(out.size()), first, second, a.reserved_bytes));
  };
  switch (pl.placement) {
    case Placement::Uniform:  // the encoder runs inside stage 0's forwards and backwards
      for (int s = 0; s < pp; ++s) {
        const Part llm = llm_part(c, s, llm_in_flight(s), a);
        if (s == 0) {
          const Part enc = encoder_part(c, 0, llm_in_flight(0), images, a, false);
          add(enc, &llm);
        } else {
          add(llm, nullptr);
        }
      }
      break;
    case Placement::Colocated: {  // every rank encodes a share; the schedule sets how many wait for their backward
      int64_t encoded = 1;
      if (pp > 1) {
        encoded = c.layout.encoder_schedule == "whole_step"
                      ? m
                      : std::min<int64_t>(m, c.layout.encoder_in_flight > 0 ? c.layout.encoder_in_flight : pp + 1);
      }
      const Part enc = encoder_part(c, 0, encoded, images, a, false);
      for (int s = 0; s < pp; ++s) {
        const Part llm = llm_part(c, s, llm_in_flight(s), a);
        add(enc, &llm);
      }
      break;
    }
    case Placement::NonColocated: {
      // The encoder's stages run 1F1B as if the LLM were run_ahead - 1 more stages.
      const int64_t ahead = std::min<int64_t>(c.layout.run_ahead, m);
      const int enc_pp = pl.encoder.pp;
      for (int s = 0; s < enc_pp; ++s) {
        const int64_t in_flight = std::min<int64_t>(m, enc_pp + ahead - 1 - s);
        add(encoder_part(c, s, in_flight, images, a, true), nullptr);
      }
      for (int s = 0; s < pp; ++s) {
        add(llm_part(c, s, llm_in_flight(s), a), nullptr);
      }
      break;
    }
  }
  return out;
}

const RankMemory& fullest_rank(const std::vector<RankMemory>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("fullest_rank: no ranks");
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankMemory& a, const RankMemory& b) { return a.total() < b.total(); });
}

double all_ranks_bytes(const std::vector<RankMemory>& ranks) {
  double sum = 0;
  for (const RankMemory& r : ranks) sum += r.total() * r.ranks;
  return sum;
}

}  // namespace hetpar
