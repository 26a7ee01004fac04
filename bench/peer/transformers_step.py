"""Times full training steps of a LLaVA-shaped model in transformers' eager
PyTorch: zero_grad, forward with labels, backward, AdamW step.

The model is the one hetpar trains (see src/interop/hf_llava.cpp,
llava_config_json): SigLIP vision tower without pooling head, features from
its last hidden state, a 2-layer gelu_pytorch_tanh projector with bias, a
Llama text model with an untied LM head. Weights are random, fp32.

Prints one JSON line: the seconds of each timed step, every loss, the thread
count and the shapes. peer_bench.py runs it; it also runs on its own:

    python bench/peer/transformers_step.py --threads 1 --warmup 2 --steps 5
"""
import argparse
import json
import math
import sys
import time

import torch

BOS_TOKEN = 1
IMAGE_TOKEN = 2
FIRST_TEXT_TOKEN = 3

# (flag, default, help): the shapes both sides of the benchmark take.
SHAPE_FLAGS = [
    ("vision-hidden", 256, "SigLIP hidden size"),
    ("vision-layers", 4, "SigLIP layers"),
    ("vision-heads", 4, "SigLIP attention heads"),
    ("vision-mlp", 1024, "SigLIP MLP hidden size"),
    ("image-size", 64, "side of the square image, pixels"),
    ("patch-size", 8, "side of a square patch, pixels"),
    ("channels", 3, "colour channels"),
    ("llm-hidden", 256, "Llama hidden size"),
    ("llm-layers", 4, "Llama layers"),
    ("llm-heads", 4, "Llama query heads"),
    ("llm-kv-heads", 2, "Llama key/value heads"),
    ("llm-ffn", 640, "Llama SwiGLU intermediate size"),
    ("vocab", 1024, "vocabulary size"),
    ("seq-len", 256, "tokens per sample, image tokens included"),
    ("batch", 8, "samples per step, one image each"),
]
# (flag, default, help): AdamW settings, the same on both sides.
OPTIM_FLAGS = [
    ("lr", 1e-4, "AdamW learning rate (constant)"),
    ("beta1", 0.9, "AdamW beta1"),
    ("beta2", 0.95, "AdamW beta2"),
    ("eps", 1e-8, "AdamW epsilon"),
    ("weight-decay", 0.01, "AdamW weight decay, on parameters of 2 or more dimensions only"),
    ("grad-clip", 0.0, "clip the global gradient norm to this; 0 = no clipping"),
    ("adamw", "fused", "torch.optim.AdamW implementation: fused (the transformers Trainer's default), foreach "
                       "or for-loop"),
]
ADAMW_IMPLEMENTATIONS = {"fused": {"fused": True}, "foreach": {"foreach": True},
                         "for-loop": {"foreach": False, "fused": False}}


def add_model_flags(parser):
    for name, default, text in SHAPE_FLAGS + OPTIM_FLAGS:
        parser.add_argument("--" + name, type=type(default), default=default, help=f"{text} (default {default})")
    parser.add_argument("--seed", type=int, default=1234, help="seed of weights and batch (default 1234)")


def tokens_per_image(a):
    return (a.image_size // a.patch_size) ** 2


def check_shapes(a):
    if a.image_size % a.patch_size:
        sys.exit(f"error: --patch-size {a.patch_size} does not divide --image-size {a.image_size}")
    if a.seq_len < 2 + tokens_per_image(a):
        sys.exit(f"error: --seq-len {a.seq_len} has no room for BOS, {tokens_per_image(a)} image tokens and text")
    if a.adamw not in ADAMW_IMPLEMENTATIONS:
        sys.exit(f"error: --adamw {a.adamw!r}: expected one of {', '.join(ADAMW_IMPLEMENTATIONS)}")
    if a.vocab <= FIRST_TEXT_TOKEN:
        sys.exit(f"error: --vocab must be > {FIRST_TEXT_TOKEN}")


def build_model(a):
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    vision = dict(model_type="siglip_vision_model", hidden_size=a.vision_hidden, intermediate_size=a.vision_mlp,
                  num_hidden_layers=a.vision_layers, num_attention_heads=a.vision_heads,
                  num_channels=a.channels, image_size=a.image_size, patch_size=a.patch_size,
                  hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=False)
    text = dict(model_type="llama", vocab_size=a.vocab, hidden_size=a.llm_hidden, intermediate_size=a.llm_ffn,
                num_hidden_layers=a.llm_layers, num_attention_heads=a.llm_heads,
                num_key_value_heads=a.llm_kv_heads, head_dim=a.llm_hidden // a.llm_heads,
                max_position_embeddings=a.seq_len, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, hidden_act="silu",
                attention_bias=False, mlp_bias=False, tie_word_embeddings=False, use_cache=False)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
                         image_seq_length=tokens_per_image(a), projector_hidden_act="gelu_pytorch_tanh",
                         vision_feature_layer=-1, vision_feature_select_strategy="full",
                         multimodal_projector_bias=True, tie_word_embeddings=False)
    # sdpa: the attention kernel hetpar calls too (at::scaled_dot_product_attention).
    config._attn_implementation = "sdpa"
    return LlavaForConditionalGeneration(config).float().train()


def build_batch(a, generator):
    """hetpar's sample layout: BOS, one run of image placeholders, then text.
    Labels are -100 on BOS and the placeholders, so the loss covers the same
    seq_len - 1 - tokens_per_image targets per sample as hetpar's."""
    tpi = tokens_per_image(a)
    ids = torch.randint(FIRST_TEXT_TOKEN, a.vocab, (a.batch, a.seq_len), generator=generator)
    ids[:, 0] = BOS_TOKEN
    ids[:, 1:1 + tpi] = IMAGE_TOKEN
    labels = ids.clone()
    labels[:, :1 + tpi] = -100
    pixels = torch.randn(a.batch, a.channels, a.image_size, a.image_size, generator=generator)
    return ids, labels, pixels


def transformers_version():
    import transformers

    return transformers.__version__


def make_optimizer(a, model):
    # hetpar's grouping: matrices (2 or more dims) decay, norms and biases do not.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, **ADAMW_IMPLEMENTATIONS[a.adamw])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_flags(parser)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    a = parser.parse_args()
    check_shapes(a)

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = build_model(a)
    ids, labels, pixels = build_batch(a, torch.Generator().manual_seed(a.seed))
    optimizer = make_optimizer(a, model)

    seconds, losses = [], []
    for step in range(a.warmup + a.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = model(input_ids=ids, pixel_values=pixels, labels=labels, use_cache=False).loss
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        optimizer.step()
        elapsed = time.perf_counter() - start
        losses.append(loss.item())
        if step >= a.warmup:
            seconds.append(elapsed)

    # Parameters that never get a gradient: computed (or not) but not trained.
    no_grad = [name for name, p in model.named_parameters() if p.grad is None]
    print(json.dumps({
        "side": "transformers",
        "step_seconds": seconds,
        "losses": losses,
        "losses_finite": all(math.isfinite(x) for x in losses),
        "threads": torch.get_num_threads(),
        "warmup": a.warmup,
        "shapes": {name.replace("-", "_"): getattr(a, name.replace("-", "_")) for name, _, _ in SHAPE_FLAGS},
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameters_without_grad": sum(p.numel() for name, p in model.named_parameters() if p.grad is None),
        "names_without_grad": no_grad,
        "target_tokens": int((labels[:, 1:] != -100).sum()),
        "attn_implementation": model.config._attn_implementation,
        "adamw": a.adamw,
        "torch_version": torch.__version__,
        "transformers_version": transformers_version(),
    }))
    return 0 if all(math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
