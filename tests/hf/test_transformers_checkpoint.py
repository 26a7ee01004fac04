"""A LLaVA built and saved by transformers itself (save_pretrained: its key
layout, its config.json) is read by `hetpar eval` with no run file: the model's
shape and semantics come from config.json (grouped-query attention, an exact-GELU
projector, image token 7, RoPE base 5000, RMSNorm eps 1e-6, features from the
tower's second-to-last layer with the first token dropped, an unused SigLIP
pooling head), and the loss of a ragged batch (0, 1, 3 and 2 images per sample)
equals transformers' within 1e-5 relative; sharded weights read the same; a run
file or a setting that contradicts config.json is refused naming both values."""
import json
import os
import re
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, SiglipVisionConfig

HETPAR = os.environ["HETPAR_BINARY"]
TINY_RUN = os.path.join(os.environ["HETPAR_SOURCE_DIR"], "workloads", "tiny.toml")
IMAGE_TOKEN = 7
TOKENS_PER_IMAGE = 15  # 32 px images, 8 px patches: 16 patches, the first dropped
IMAGES_PER_SAMPLE = [0, 1, 3, 2]
SEQ = 80
VOCAB = 300
REL_TOL = 1e-5


def hetpar(*args):
    return subprocess.run([HETPAR, *map(str, args)], capture_output=True, text=True, timeout=300)


def llava_config():
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                image_size=32, patch_size=8, layer_norm_eps=1e-6, vision_use_head=True)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=5000.0,
                       max_position_embeddings=256, tie_word_embeddings=False)
    return LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
                       projector_hidden_act="gelu", vision_feature_layer=-2,
                       vision_feature_select_strategy="default", tie_word_embeddings=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.manual_seed(0)
    llava = LlavaForConditionalGeneration(llava_config()).eval()
    # transformers' init leaves norms at one and biases at zero: move them, so a
    # norm or bias read wrongly changes the loss.
    with torch.no_grad():
        for name, p in llava.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    root = tmp_path_factory.mktemp("transformers")
    llava.save_pretrained(root / "model")
    llava.save_pretrained(root / "sharded", max_shard_size="50KB")
    return llava, root


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(IMAGE_TOKEN + 1, VOCAB, (len(IMAGES_PER_SAMPLE), SEQ), generator=gen)
    for row, images in enumerate(IMAGES_PER_SAMPLE):
        for k in range(images):
            start = 2 + k * (TOKENS_PER_IMAGE + 4)
            ids[row, start:start + TOKENS_PER_IMAGE] = IMAGE_TOKEN
    labels = ids.clone()
    labels[ids == IMAGE_TOKEN] = -100
    labels[:, 0] = -100
    pixels = torch.randn(sum(IMAGES_PER_SAMPLE), 3, 32, 32, generator=gen)
    path = tmp_path_factory.mktemp("batch") / "batch.safetensors"
    save_file({"input_ids": ids, "labels": labels, "pixel_values": pixels}, str(path))
    return path, ids, labels, pixels


def eval_loss(model_dir, batch_path, *args):
    done = hetpar("eval", "--init-hf", model_dir, "--batch", batch_path, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return float(re.search(r"eval loss: (\S+)", done.stdout).group(1)), done.stdout + done.stderr


def transformers_loss(llava, ids, labels, pixels):
    with torch.no_grad():
        return llava(input_ids=ids, pixel_values=pixels, labels=labels).loss.item()


def test_the_saved_layout_is_transformers_own(model):
    _, root = model
    names = json.loads((root / "sharded" / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(n.startswith("language_model.model.") or n.startswith("model.language_model.") for n in names)
    assert any(".head." in n for n in names), "the SigLIP pooling head is in the checkpoint"


@pytest.mark.parametrize("layout", [[], ["--set", "layout.llm.tp=2", "--set", "layout.encoder.tp=2"]],
                         ids=["one_rank", "tp2"])
def test_eval_without_a_run_file_gives_transformers_loss(model, batch, layout):
    llava, root = model
    path, ids, labels, pixels = batch
    theirs = transformers_loss(llava, ids, labels, pixels)
    ours, log = eval_loss(root / "model", path, *layout)
    print(f"transformers {theirs:.9g}  hetpar {ours:.9g}  rel diff {abs(theirs - ours) / abs(theirs):.3g}")
    assert abs(theirs - ours) <= REL_TOL * abs(theirs)
    assert "not used, as in transformers" in log and "pooling head" in log
    assert "vision_feature_layer = -2" in log


def test_sharded_weights_read_the_same(model, batch):
    _, root = model
    assert (root / "sharded" / "model.safetensors.index.json").exists()
    assert eval_loss(root / "sharded", batch[0])[0] == eval_loss(root / "model", batch[0])[0]


def test_a_run_file_that_contradicts_config_json_is_refused(model, batch):
    _, root = model
    done = hetpar("eval", TINY_RUN, "--init-hf", root / "model", "--batch", batch[0])
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(r"encoder\.\w+: \S+ here, but vision_config\.\w+ = \S+ in .*config\.json", done.stderr), done.stderr
    done = hetpar("eval", "--init-hf", root / "model", "--batch", batch[0], "--set", "llm.rope_theta=10000.0")
    assert done.returncode == 2
    assert "llm.rope_theta: 10000.0 here, but text_config.rope_" in done.stderr, done.stderr


def test_training_starts_from_it_with_a_run_file_of_the_rest(model, batch, tmp_path):
    """A run file without model keys: the model comes from config.json, the
    weights from the checkpoint (the first step's loss is transformers' loss
    of that step's batch, not a fresh model's)."""
    _, root = model
    run = tmp_path / "run.toml"
    run.write_text("[run]\nsteps = 2\n[llm]\nseq_len = 64\n[data]\nglobal_batch_size = 4\n")
    done = hetpar("train", run, "--init-hf", root / "model", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    resolved = (tmp_path / "out" / "config.toml").read_text()
    assert "image_token_id = 7" in resolved and "rope_theta = 5000" in resolved, resolved
    fresh = hetpar("train", run, "--set", "llm.vocab_size=300", "--out", tmp_path / "fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    loss = lambda out: float(re.search(r"step +1 \| loss (\S+)", out.stdout).group(1))
    assert loss(done) != loss(fresh)


def edited_copy(root, tmp_path, edit):
    copy = tmp_path / "edited"
    shutil.copytree(root / "model", copy)
    config = json.loads((copy / "config.json").read_text())
    edit(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def set_rope_type(config):
    text = config["text_config"]
    if "rope_parameters" in text:
        text["rope_parameters"]["rope_type"] = "llama3"
    else:
        text["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}


@pytest.mark.parametrize("edit, message", [
    (set_rope_type, '"llama3" is not supported'),
    (lambda c: c.update(vision_feature_layer=[-2, -1]), "vision_feature_layer: features from several layers"),
    (lambda c: c.update(projector_hidden_act="relu"), 'projector_hidden_act: "relu" is not supported'),
    (lambda c: c["vision_config"].update(model_type="clip_vision_model"), "vision_config.model_type"),
    (lambda c: c["text_config"].pop("hidden_size"), "text_config.hidden_size: missing"),
])
def test_unsupported_settings_are_refused_by_name(model, batch, tmp_path, edit, message):
    _, root = model
    done = hetpar("eval", "--init-hf", edited_copy(root, tmp_path, edit), "--batch", batch[0])
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert "launching" not in done.stdout


def test_a_tensor_of_no_known_part_is_refused(model, batch, tmp_path):
    _, root = model
    copy = tmp_path / "extra"
    shutil.copytree(root / "model", copy)
    from safetensors.torch import load_file
    tensors = load_file(str(copy / "model.safetensors"))
    tensors["language_model.model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    save_file(tensors, str(copy / "model.safetensors"))
    done = hetpar("eval", "--init-hf", copy, "--batch", batch[0])
    assert done.returncode != 0
    assert "q_proj.bias" in done.stdout + done.stderr and "no part of the model" in done.stdout + done.stderr
