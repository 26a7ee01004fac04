// The whole multimodal model (encoder -> projector -> LLM with images spliced
// into the token sequence, ragged: 0, 1 and 3 images per sample) at TP 1, 2
// and 4, against the same model built on a single rank (a group of one) on
// every rank: loss, logits, every parameter's gradient and the pixels'
// gradient. fp32, |a - b| <= 1e-6 + 1e-5 * max|b|. With activation recompute
// (model/recompute.hpp) the same TP model gives the same bits as without, in
// fp32 and under bf16 autocast, with a frozen encoder, and with only each
// module's first layer recomputed.
#include <ATen/ATen.h>

#include "metrics/model_flops.hpp"
#include "model/autocast_scope.hpp"
#include "model/llama.hpp"
#include "model/param_init.hpp"
#include "model/vision_encoder.hpp"
#include "tests/dist_harness.hpp"

namespace hetpar::test {
namespace {

constexpr uint64_t kSeed = 1234;


// A sharded parameter differs from the full one in exactly one dimension.
at::Tensor my_shard_of(const at::Tensor& full, const at::Tensor& local, const Group& tp) {
  for (int64_t d = 0; d < full.dim(); ++d) {
    if (full.size(d) != local.size(d)) return shard(full, d, tp.rank(), tp.size());
  }
  return full;
}

void expect_same_grads(torch::nn::Module& model, torch::nn::Module& ref, const Group& tp, const std::string& tag) {
  auto ref_params = ref.named_parameters();
  int compared = 0;
  for (const auto& p : model.named_parameters()) {
    const at::Tensor& r = ref_params[p.key()];
    require(p.value().grad().defined(), "{}{}: no gradient", tag, p.key());
    expect_close(p.value().grad(), my_shard_of(r.grad(), p.value(), tp), tag + p.key() + " grad");
    ++compared;
  }
  require(compared == static_cast<int>(ref_params.size()), "{}: {} of {} parameters compared", tag, compared,
          ref_params.size());
}

struct Models {
  std::shared_ptr<VisionEncoder> encoder;
  std::shared_ptr<GeluMlp> projector;
  std::shared_ptr<LlamaModel> llm;
};

Models build(const EncoderConfig& e, const LlmConfig& l, Group& tp) {
  return {std::make_shared<VisionEncoder>(e, kSeed, tp), make_projector(e, l, kSeed, tp),
          std::make_shared<LlamaModel>(l, kSeed, tp)};
}

// The batch: 3 samples of 24 tokens holding 0, 1 and 3 images of 4 tokens.
struct Batch {
  at::Tensor pixels, ids, targets, image_mask;
};

Batch make_batch(const EncoderConfig& e, const LlmConfig& l) {
  Batch b;
  b.pixels = init_normal(5, "pixels", {4, e.channels, e.image_size, e.image_size}, 1.0);
  b.ids = (init_normal(5, "ids", {3, 24}, 1.0).abs() * 1000).to(at::kLong) % l.vocab_size;
  b.image_mask = at::zeros({3, 24}, at::kBool);
  b.image_mask[1].narrow(0, 2, 4).fill_(true);
  b.image_mask[2].narrow(0, 1, 8).fill_(true);
  b.image_mask[2].narrow(0, 12, 4).fill_(true);
  b.targets = at::roll(b.ids, -1, 1);
  b.targets.masked_fill_(b.image_mask, -100);  // no loss on image positions
  b.targets.select(1, 23).fill_(-100);
  return b;
}

struct Result {
  at::Tensor loss, logits, pixels_grad;
};

// One forward (under bf16 autocast where `bf16`) and backward; the pixels
// need a gradient unless the encoder is frozen.
Result step(Models& m, const Batch& b, bool bf16 = false, bool frozen = false) {
  at::Tensor pixels = b.pixels.clone().set_requires_grad(!frozen);
  at::Tensor logits, loss;
  {
    const AutocastScope autocast(bf16);
    const at::Tensor feats = m.encoder->forward(pixels);                    // [4, 4, enc hidden]
    const at::Tensor rows = m.projector->forward(feats).reshape({16, -1});  // [16, llm hidden]
    logits = m.llm->forward(b.ids, rows, b.image_mask);
    const double count = (b.targets >= 0).sum().item<double>();
    loss = m.llm->loss_sum(logits.to(at::kFloat), b.targets) / count;
  }
  loss.backward();
  return {loss.detach(), logits.detach(), pixels.grad()};
}

HETPAR_WORKER(multimodal_model) {
  std::vector<GroupSpec> singles;
  for (int r = 0; r < rt.world_size(); ++r) singles.push_back({"single", {r}});
  rt.create_groups(singles);
  Group& tp = rt.world();
  Group& one = rt.group({rt.rank()});

  EncoderConfig e;
  e.image_size = 16, e.patch_size = 8, e.channels = 3, e.hidden = 32, e.layers = 2, e.heads = 4, e.mlp_hidden = 64;
  LlmConfig l;
  l.vocab_size = 64, l.hidden = 64, l.layers = 2, l.heads = 8, l.kv_heads = 4, l.ffn_hidden = 96, l.seq_len = 32;
  const Batch batch = make_batch(e, l);

  Models par = build(e, l, tp), ref = build(e, l, one);
  auto count = [](torch::nn::Module& m) {
    int64_t n = 0;
    for (const at::Tensor& p : m.parameters()) n += p.numel();
    return n;
  };
  require(count(*ref.encoder) == encoder_parameters(e), "encoder has {} parameters, the count says {}",
          count(*ref.encoder), encoder_parameters(e));
  require(count(*ref.projector) == projector_parameters(e, l), "projector has {} parameters, the count says {}",
          count(*ref.projector), projector_parameters(e, l));
  require(count(*ref.llm) == llm_parameters(l), "llm has {} parameters, the count says {}", count(*ref.llm),
          llm_parameters(l));
  // A shard is a tensor of its own: a view into the full weight would keep
  // every rank holding all of it (as dim-0 cuts once did).
  for (torch::nn::Module* m : {static_cast<torch::nn::Module*>(par.encoder.get()),
                               static_cast<torch::nn::Module*>(par.projector.get()),
                               static_cast<torch::nn::Module*>(par.llm.get())}) {
    for (const auto& p : m->named_parameters()) {
      const size_t own = static_cast<size_t>(p.value().numel() * p.value().element_size());
      require(p.value().storage().nbytes() == own, "{}: its storage holds {} bytes, the shard {}", p.key(),
              p.value().storage().nbytes(), own);
    }
  }
  const Result got = step(par, batch), want = step(ref, batch);
  require(want.loss.item<double>() > 1.0, "reference loss {} looks degenerate", want.loss.item<double>());
  expect_close(got.loss, want.loss, "loss");
  expect_close(got.logits, my_shard_of(want.logits, got.logits, tp), "logits");
  expect_close(got.pixels_grad, want.pixels_grad, "pixel grad");
  expect_same_grads(*par.encoder, *ref.encoder, tp, "encoder.");
  expect_same_grads(*par.projector, *ref.projector, tp, "projector.");
  expect_same_grads(*par.llm, *ref.llm, tp, "llm.");
}

void require_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  require(got.defined() == want.defined(), "{}: defined {} vs {}", what, got.defined(), want.defined());
  if (got.defined()) require(at::equal(got, want), "{}: differs by {}", what, (got - want).abs().max().item<double>());
}

// Recompute changes when a layer's work is done, not what it computes: the
// same loss, logits and gradients to the bit as the model that keeps its
// activations, on the same TP group.
HETPAR_WORKER(recompute_model) {
  Group& tp = rt.world();
  EncoderConfig e;
  e.image_size = 16, e.patch_size = 8, e.channels = 3, e.hidden = 32, e.layers = 2, e.heads = 4, e.mlp_hidden = 64;
  LlmConfig l;
  l.vocab_size = 64, l.hidden = 64, l.layers = 3, l.heads = 8, l.kv_heads = 4, l.ffn_hidden = 96, l.seq_len = 32;
  const Batch batch = make_batch(e, l);
  // The last case recomputes only the first layer of each module (run.recompute_layers = 1).
  struct Case {
    bool bf16, frozen, first_layer_only;
  };
  for (const auto& [bf16, frozen, first_layer_only] :
       {Case{false, false, false}, Case{true, false, false}, Case{false, true, false}, Case{false, false, true}}) {
    const std::string tag = std::string(bf16 ? "bf16" : "fp32") + (frozen ? " frozen encoder" : "") +
                            (first_layer_only ? " first layer only" : "") + ": ";
    Models kept = build(e, l, tp), again = build(e, l, tp);
    again.encoder->set_recompute(first_layer_only ? 1 : again.encoder->block_count());
    again.llm->set_recompute(first_layer_only ? 1 : again.llm->block_count());
    if (frozen) {
      for (Models* m : {&kept, &again}) {
        for (at::Tensor& p : m->encoder->parameters()) p.set_requires_grad(false);
      }
    }
    const Result want = step(kept, batch, bf16, frozen), got = step(again, batch, bf16, frozen);
    require_equal(got.loss, want.loss, tag + "loss");
    require_equal(got.logits, want.logits, tag + "logits");
    require_equal(got.pixels_grad, want.pixels_grad, tag + "pixel grad");
    int compared = 0;
    using Pair = std::pair<torch::nn::Module*, torch::nn::Module*>;
    for (const auto& [mine, ref] : {Pair{again.encoder.get(), kept.encoder.get()},
                                    Pair{again.projector.get(), kept.projector.get()},
                                    Pair{again.llm.get(), kept.llm.get()}}) {
      auto ref_params = ref->named_parameters();
      for (const auto& p : mine->named_parameters()) {
        require(p.value().grad().defined() == p.value().requires_grad(), "{}{}: gradient where none is due, or none",
                tag, p.key());
        require_equal(p.value().grad(), ref_params[p.key()].grad(), tag + p.key() + " grad");
        ++compared;
      }
    }
    require(compared > 20, "{}only {} parameters compared", tag, compared);
  }
}

TEST(ModelRecompute, SameBitsAsKeepingTheActivations) {
  for (int ranks : {1, 2}) EXPECT_TRUE(all_ranks_succeeded(run_workers("recompute_model", ranks))) << "tp" << ranks;
}

class ModelTp : public ::testing::TestWithParam<int> {};

TEST_P(ModelTp, MatchesSingleRank) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("multimodal_model", GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Tp, ModelTp, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

}  // namespace
}  // namespace hetpar::test
