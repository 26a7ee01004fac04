"""hetpar <-> transformers: a model hetpar trained and exported loads in
transformers' LlavaForConditionalGeneration and gives the same loss on the
same batch as `hetpar eval` (1e-4 relative), as one file or as one shard per
pipeline stage; eval gives the same loss under every kind of layout (TP, DP,
CP, PP, colocated, non-colocated; 1e-5 relative), and in float64 the float32
loss; broken inputs (weights or batches), and a batch a layout cannot split,
fail with a clear error."""
import os
import re
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlavaForConditionalGeneration

HETPAR = os.environ["HETPAR_BINARY"]
RUN = os.path.join(os.environ["HETPAR_SOURCE_DIR"], "workloads", "tiny.toml")
IMAGE_TOKEN = 2
FIRST_TEXT_TOKEN = 3
TOKENS_PER_IMAGE = 16  # tiny.toml: 32 px images, 8 px patches
REL_TOL = 1e-4


def hetpar(*args):
    return subprocess.run([HETPAR, *args], capture_output=True, text=True, timeout=300)


def eval_loss(model_dir, batch, *sets):
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(batch), *sets)
    assert done.returncode == 0, done.stdout + done.stderr
    return float(re.search(r"eval loss: (\S+)", done.stdout).group(1))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model trained for 5 steps at TP 2, then exported."""
    root = tmp_path_factory.mktemp("hf")
    done = hetpar("train", RUN, "--set", "run.steps=5", "--set", "layout.llm.tp=2", "--set",
                  "data.global_batch_size=4", "--out", str(root / "run"), "--save-hf", str(root / "model"))
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "model"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Two samples of 64 tokens in transformers' conventions: 1 and 2 images."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(FIRST_TEXT_TOKEN, 512, (2, 64), generator=gen)
    ids[0, 1:1 + TOKENS_PER_IMAGE] = IMAGE_TOKEN
    ids[1, 3:3 + TOKENS_PER_IMAGE] = IMAGE_TOKEN
    ids[1, 30:30 + TOKENS_PER_IMAGE] = IMAGE_TOKEN
    labels = ids.clone()
    labels[ids == IMAGE_TOKEN] = -100
    labels[:, 0] = -100
    path = tmp_path_factory.mktemp("batch") / "batch.safetensors"
    save_file({"input_ids": ids, "labels": labels,
               "pixel_values": torch.randn(3, 3, 32, 32, generator=gen)}, str(path))
    return path


def transformers_loss(model_dir, batch):
    model = LlavaForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    tensors = load_file(str(batch))
    with torch.no_grad():
        out = model(input_ids=tensors["input_ids"], pixel_values=tensors["pixel_values"], labels=tensors["labels"])
    return out.loss.item()


def test_transformers_gives_the_same_loss(model_dir, batch):
    theirs = transformers_loss(model_dir, batch)
    ours = eval_loss(model_dir, batch, "--set", "layout.llm.tp=2")
    print(f"transformers {theirs:.9g}  hetpar {ours:.9g}  rel diff {abs(theirs - ours) / abs(theirs):.3g}")
    assert abs(theirs - ours) <= REL_TOL * abs(theirs)


@pytest.fixture(scope="module")
def one_rank_loss(model_dir, batch):
    return eval_loss(model_dir, batch)


@pytest.mark.parametrize("sets", [
    ["layout.llm.tp=2", "layout.llm.dp=2"],
    ["layout.llm.cp=2"],
    ["layout.llm.pp=2"],
    ["layout.placement=colocated", "layout.encoder.dp=2", "layout.llm.pp=2"],
    ["layout.placement=non-colocated", "layout.encoder.dp=1"],
    ["layout.placement=non-colocated", "layout.encoder.pp=2", "layout.encoder.dp=1", "layout.llm.pp=2"],
], ids=["tp2_dp2", "cp2", "pp2", "colocated_pp2", "non_colocated", "non_colocated_both_pp2"])
def test_eval_does_not_depend_on_the_layout(model_dir, batch, one_rank_loss, sets):
    """Eval runs the batch as one step of the layout's own schedule: any layout scores it alike."""
    loss = eval_loss(model_dir, batch, *[arg for s in sets for arg in ("--set", s)])
    print(f"{' '.join(sets)}: {loss:.9g} (one rank {one_rank_loss:.9g})")
    assert abs(loss - one_rank_loss) <= 1e-5 * abs(one_rank_loss), (loss, one_rank_loss)


def test_training_can_start_from_an_exported_model(model_dir, tmp_path):
    done = hetpar("train", RUN, "--set", "run.steps=1", "--set", "data.global_batch_size=4",
                  "--init-hf", str(model_dir), "--out", str(tmp_path / "resumed"))
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = hetpar("train", RUN, "--set", "run.steps=1", "--set", "data.global_batch_size=4",
                   "--out", str(tmp_path / "fresh"))
    loss = lambda out: float(re.search(r"step +1 \| loss (\S+)", out.stdout).group(1))
    assert loss(done) < loss(fresh), "the exported weights were not loaded"


def test_transformers_reads_a_model_exported_under_pipeline_parallelism(model_dir, batch, tmp_path):
    """Re-exported non-colocated with both modules pipelined (one shard per stage and an
    index): transformers loads the shards and gives the loss of the one-file export."""
    done = hetpar("train", RUN, "--set", "run.steps=1", "--set", "optim.lr=1e-30", "--set", "optim.min_lr=0",
                  "--set", "layout.placement=non-colocated", "--set", "layout.encoder.pp=2",
                  "--set", "layout.encoder.dp=1", "--set", "layout.llm.pp=2", "--set", "layout.llm.tp=2",
                  "--init-hf", str(model_dir), "--out", str(tmp_path / "run"), "--save-hf", str(tmp_path / "sharded"))
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.name for p in (tmp_path / "sharded").glob("model*"))
    assert files == [f"model-0000{k}-of-00004.safetensors" for k in range(1, 5)] + ["model.safetensors.index.json"]
    one_file, sharded = transformers_loss(model_dir, batch), transformers_loss(tmp_path / "sharded", batch)
    assert abs(one_file - sharded) <= 1e-6 * abs(one_file)
    assert abs(eval_loss(tmp_path / "sharded", batch) - one_file) <= REL_TOL * abs(one_file)


@pytest.fixture(scope="module")
def batch_dir(batch, tmp_path_factory):
    """The batch's two samples as two batch files of one sample each (1 and 2 images), and a file that is not one."""
    tensors = load_file(str(batch))
    root = tmp_path_factory.mktemp("batch_dir")
    for name, rows, images in (("a.safetensors", slice(0, 1), slice(0, 1)), ("b.safetensors", slice(1, 2), slice(1, 3))):
        save_file({"input_ids": tensors["input_ids"][rows].contiguous(), "labels": tensors["labels"][rows].contiguous(),
                   "pixel_values": tensors["pixel_values"][images].contiguous()}, str(root / name))
    (root / "notes.txt").write_text("not a batch file")
    return root


@pytest.mark.parametrize("sets, batches", [
    (["data.global_batch_size=2"], 1),
    (["data.global_batch_size=1"], 2),
    (["data.global_batch_size=2", "layout.llm.pp=2"], 1),
    (["data.global_batch_size=1", "layout.placement=non-colocated", "layout.encoder.dp=1"], 2),
], ids=["one_step", "two_steps", "pp2", "non_colocated_two_steps"])
def test_eval_of_a_directory_is_the_mean_over_all_its_target_tokens(model_dir, batch_dir, one_rank_loss, sets, batches):
    """Split into files and steps, the samples give the loss of the one file: the mean over all their target tokens."""
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(batch_dir),
                  *[arg for s in sets for arg in ("--set", s)])
    assert done.returncode == 0, done.stdout + done.stderr
    loss = float(re.search(r"eval loss: (\S+)", done.stdout).group(1))
    print(f"{' '.join(sets)}: {loss:.9g} (one file {one_rank_loss:.9g})")
    assert abs(loss - one_rank_loss) <= 1e-6 * abs(one_rank_loss), (loss, one_rank_loss)
    assert f"in {batches} batch(es) of {2 // batches} samples" in done.stdout, done.stdout


def test_a_directory_with_too_few_samples_for_a_step_exits_two(model_dir, batch_dir):
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(batch_dir))  # tiny.toml: 8 a step
    assert done.returncode == 2, done.stdout + done.stderr
    assert "2 samples in 2 files, fewer than data.global_batch_size = 8" in done.stderr, done.stderr
    assert "launching" not in done.stdout


def test_a_batch_the_layout_cannot_split_exits_two(model_dir, batch):
    """Two samples cannot fill four LLM replicas, nor two pipeline stages in each of two replicas."""
    for sets, message in ((["layout.llm.dp=4"], "data.global_batch_size: must be a multiple of data.micro_batch_size"),
                          (["layout.llm.pp=2", "layout.llm.dp=2"], "fewer than the 2 pipeline stages")):
        done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(batch),
                      *[arg for s in sets for arg in ("--set", s)])
        assert done.returncode == 2, done.stdout + done.stderr
        assert message in done.stderr, done.stderr
        assert "eval sets --set data.global_batch_size=2 --set data.micro_batch_size=1 from the batch file" in done.stderr


PATCH = "model.vision_tower.embeddings.patch_embedding.weight"


def edited_model(model_dir, tmp_path, edit):
    """A copy of the model whose tensors `edit` changes in place."""
    tensors = load_file(str(model_dir / "model.safetensors"))
    edit(tensors)
    edited = tmp_path / "edited"
    edited.mkdir()
    save_file(tensors, str(edited / "model.safetensors"))
    (edited / "config.json").write_text((model_dir / "config.json").read_text())
    return edited


def replace(name, change):
    def edit(tensors):
        tensors[name] = change(tensors[name]).contiguous()
    return edit


def set_first(name, value):
    def change(t):
        t = t.clone()
        t.view(-1)[0] = value
        return t
    return replace(name, change)


@pytest.mark.parametrize("edit, message", [
    (lambda tensors: tensors.pop("lm_head.weight"), "no tensor lm_head.weight"),
    (replace(PATCH, lambda t: t.permute(0, 2, 3, 1)),
     f"{PATCH} has shape [64,8,8,3], not transformers' [hidden, channels, patch, patch] = [64,3,8,8]"),
    (replace(PATCH, lambda t: t.reshape(t.shape[0], -1)),
     f"{PATCH} has shape [64,192], not transformers' [hidden, channels, patch, patch] = [64,3,8,8]"),
    (replace("lm_head.weight", lambda t: t.int()), "lm_head.weight holds Int, not floating-point weights"),
    (set_first("lm_head.weight", float("nan")), "lm_head.weight holds a NaN or infinite value"),
    (set_first(PATCH, float("inf")), f"{PATCH} holds a NaN or infinite value"),
], ids=["missing", "patch_channels_last", "patch_flat", "int", "nan", "inf"])
def test_a_weight_the_model_cannot_load_is_named(model_dir, batch, tmp_path, edit, message):
    """Same-sized patch weights in another layout would load scrambled, integer
    ones truncated and non-finite ones give a NaN loss: each is named instead."""
    done = hetpar("eval", RUN, "--init-hf", str(edited_model(model_dir, tmp_path, edit)), "--batch", str(batch))
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stdout + done.stderr, done.stdout + done.stderr


def test_float64_weights_and_pixels_give_the_float32_loss(model_dir, batch, one_rank_loss, tmp_path):
    model = edited_model(model_dir, tmp_path, lambda tensors: tensors.update({k: v.double() for k, v in tensors.items()}))
    pixels = broken_batch(batch, tmp_path, pixel_values=lambda t: t.double())
    assert eval_loss(model, pixels) == one_rank_loss


def test_non_finite_pixels_in_a_directory_are_named_by_the_rank_that_reads_them(model_dir, batch, tmp_path):
    (tmp_path / "files").mkdir()
    broken_batch(batch, tmp_path, pixel_values=set_at((2, 0, 1, 1), float("nan"))).rename(tmp_path / "files" / "a.safetensors")
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(tmp_path / "files"),
                  "--set", "data.global_batch_size=2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{tmp_path}/files/a.safetensors: pixel_values image 2 holds a NaN or infinite value" in done.stderr, done.stderr


def test_a_directory_without_config_json_exits_two(model_dir, batch, tmp_path):
    (tmp_path / "model.safetensors").write_bytes((model_dir / "model.safetensors").read_bytes())
    done = hetpar("eval", RUN, "--init-hf", str(tmp_path), "--batch", str(batch))
    assert done.returncode == 2
    assert str(tmp_path / "config.json") in done.stderr and "cannot read config.json" in done.stderr


def test_a_missing_batch_file_exits_two(model_dir):
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", "/nonexistent/batch.safetensors")
    assert done.returncode == 2
    assert "/nonexistent/batch.safetensors" in done.stderr


def broken_batch(batch, tmp_path, **changes):
    tensors = load_file(str(batch))
    for name, edit in changes.items():
        tensors[name] = edit(tensors[name].clone())
    path = tmp_path / "broken_batch.safetensors"
    save_file(tensors, str(path))
    return path


def set_at(position, value):
    def edit(t):
        t[position] = value
        return t
    return edit


@pytest.mark.parametrize("changes, message", [
    ({"input_ids": set_at((1, 50), 512)}, "sample 1: input_ids holds 512 at position 50, outside the vocabulary [0, 512)"),
    ({"input_ids": set_at((0, 5), -3)}, "input_ids holds -3"),
    ({"labels": set_at((0, 40), 9999)}, "sample 0: labels holds 9999 at position 40, outside the vocabulary [0, 512) (and not -100"),
    ({"labels": lambda t: torch.full_like(t, -100)}, "no target token"),
    ({"pixel_values": lambda t: t[:, :, :16, :16].contiguous()}, "pixel_values has shape [3, 3, 16, 16], expected [images, 3, 32, 32]"),
    ({"input_ids": set_at((0, 8), 7)}, "sample 0: the image placeholders (token 2) at positions 7 and 9 break a run of 16"),
    ({"input_ids": set_at((0, 40), 2)}, "sample 0 holds 17 image placeholders (token 2), not a whole number of images"),
    ({"pixel_values": lambda t: t[:2].contiguous()}, "48 image placeholders (token 2) but 2 images of 16 tokens"),
    ({"input_ids": lambda t: t.float() + 0.9}, "input_ids must hold integers (int64 or int32), not Float"),
    ({"pixel_values": lambda t: t.int()}, "pixel_values must hold floats, not Int"),
    ({"pixel_values": set_at((2, 0, 1, 1), float("inf"))}, "pixel_values image 2 holds a NaN or infinite value"),
])
def test_a_batch_the_model_cannot_score_exits_two_before_any_rank_starts(model_dir, batch, tmp_path, changes, message):
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(broken_batch(batch, tmp_path, **changes)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert "launching" not in done.stdout


def test_the_export_carries_every_model_setting(tmp_path):
    """A model with non-default semantics (image token 9, RoPE base 5000, exact-GELU
    projector and tower, the first patch token dropped, RMSNorm eps 1e-6) exported
    by hetpar: transformers gives hetpar's loss, and hetpar reads it back with no run file."""
    settings = ["llm.image_token_id=9", "llm.rope_theta=5000.0", "llm.norm_eps=1e-6", "encoder.projector_act=gelu",
                "encoder.hidden_act=gelu", "encoder.drop_first_token=true", "encoder.norm_eps=1e-5"]
    sets = [arg for s in settings for arg in ("--set", s)]
    done = hetpar("train", RUN, "--set", "run.steps=2", "--set", "data.global_batch_size=4", *sets,
                  "--out", str(tmp_path / "run"), "--save-hf", str(tmp_path / "model"))
    assert done.returncode == 0, done.stdout + done.stderr
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(10, 512, (2, 64), generator=gen)
    ids[0, 1:16] = 9  # 15 tokens per image once the first is dropped
    ids[1, 20:35] = 9
    ids[1, 40:55] = 9
    labels = ids.clone()
    labels[ids == 9] = -100
    labels[:, 0] = -100
    path = tmp_path / "batch.safetensors"
    save_file({"input_ids": ids, "labels": labels, "pixel_values": torch.randn(3, 3, 32, 32, generator=gen)}, str(path))
    theirs = transformers_loss(tmp_path / "model", path)
    ours = hetpar("eval", "--init-hf", str(tmp_path / "model"), "--batch", str(path))
    assert ours.returncode == 0, ours.stdout + ours.stderr
    ours = float(re.search(r"eval loss: (\S+)", ours.stdout).group(1))
    assert abs(theirs - ours) <= 1e-5 * abs(theirs), (theirs, ours)
    with_run_file = eval_loss(tmp_path / "model", path, *sets)
    assert with_run_file == ours
