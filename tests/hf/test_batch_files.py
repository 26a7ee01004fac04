"""scripts/batch_files.py: samples of text and images through a LLaVA processor
into batch files. The files hold the processor's tokens (each image expanded to
its tokens, prompt and image tokens without loss); hetpar eval scores the
directory as transformers scores the same samples; hetpar trains on it; bad
input exits 2 naming the line, and nothing is overwritten."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (LlavaForConditionalGeneration, LlavaProcessor, PreTrainedTokenizerFast,
                          SiglipImageProcessorPil)

SOURCE = os.environ["HETPAR_SOURCE_DIR"]
HETPAR = os.environ["HETPAR_BINARY"]
RUN = os.path.join(SOURCE, "workloads", "tiny.toml")
SCRIPT = os.path.join(SOURCE, "scripts", "batch_files.py")
WORDS = "what is this a the cat dog sits on mat red blue green and".split()
IMAGE_TOKEN_ID = 2  # tiny.toml's llm.image_token_id


def hetpar(*args):
    return subprocess.run([HETPAR, *args], capture_output=True, text=True, timeout=300)


def batch_files(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def processor_dir(tmp_path_factory):
    """A LLaVA processor for tiny.toml: word-level tokenizer (<image> = id 2), 32 px images, 8 px patches."""
    vocab = {"<pad>": 0, "<s>": 1, "<image>": IMAGE_TOKEN_ID, **{w: 3 + i for i, w in enumerate(WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", unk_token="<pad>")
    fast.add_special_tokens({"additional_special_tokens": ["<image>"]})
    processor = LlavaProcessor(image_processor=SiglipImageProcessorPil(size={"height": 32, "width": 32}),
                               tokenizer=fast, patch_size=8, vision_feature_select_strategy="full",
                               image_token="<image>", num_additional_image_tokens=0)
    root = tmp_path_factory.mktemp("processor")
    processor.save_pretrained(str(root))
    return root


@pytest.fixture(scope="module")
def samples_file(tmp_path_factory):
    """Five samples with 0 to 2 images of other sizes than the model's, one with a prompt."""
    root = tmp_path_factory.mktemp("samples")
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png", "c.png"):
        Image.fromarray((rng.random((40, 50, 3)) * 255).astype("uint8")).save(root / name)
    lines = [{"text": "<s> <image> a red cat sits on the mat", "images": ["a.png"]},
             {"text": "<s> the dog and the cat", "images": []},
             {"prompt": "<s> what is this <image>", "response": " a blue dog", "images": ["b.png"]},
             {"text": "<s> <image> and <image> red and green", "images": ["c.png", "a.png"]},
             {"text": "<s> <image> the mat", "images": ["b.png"]}]
    (root / "samples.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root / "samples.jsonl"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    done = hetpar("train", RUN, "--set", "run.steps=3", "--set", "data.global_batch_size=4", "--out",
                  str(root / "run"), "--save-hf", str(root / "model"))
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "model"


@pytest.fixture(scope="module")
def shards(processor_dir, samples_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "train"
    done = batch_files("--processor", processor_dir, "--samples", samples_file, "--out", out, "--per-file", 2,
                       "--max-tokens", 128)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wrote 5 samples in 3 batch files" in done.stdout
    return out


def test_files_hold_the_processors_tokens_with_no_loss_on_images_prompts_and_padding(shards):
    files = sorted(p.name for p in shards.iterdir())
    assert files == ["part_00000.safetensors", "part_00001.safetensors", "part_00002.safetensors"]
    first, second = load_file(str(shards / files[0])), load_file(str(shards / files[1]))
    ids, labels = first["input_ids"], first["labels"]
    assert ids.shape == (2, 24) and first["pixel_values"].shape == (1, 3, 32, 32)  # 1 + 16 + 7 tokens
    assert (ids[0, 1:17] == IMAGE_TOKEN_ID).all() and (labels[0, 1:17] == -100).all()
    assert labels[0, 17] == ids[0, 17]
    assert (ids[1, 6:] == 0).all() and (labels[1, 6:] == -100).all()  # padding: no loss
    # The prompt ("<s> what is this" and its image's 16 tokens) carries no loss; the response does.
    prompt_row = second["labels"][0]
    assert (prompt_row[:20] == -100).all() and (prompt_row[20:23] != -100).all()
    assert second["pixel_values"].shape == (3, 3, 32, 32)  # one image, then two
    # Each sample's images, counted where they were made: hetpar indexes them without reading input_ids.
    assert first["image_counts"].tolist() == [1, 0] and second["image_counts"].tolist() == [1, 2]


def transformers_loss(model_dir, shards):
    """The mean over every target token of every file, as transformers computes it."""
    model = LlavaForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    total, count = 0.0, 0
    for path in sorted(shards.iterdir()):
        t = load_file(str(path))
        with torch.no_grad():
            loss = model(input_ids=t["input_ids"], pixel_values=t["pixel_values"], labels=t["labels"]).loss.item()
        n = int((t["labels"][:, 1:] != -100).sum())
        total, count = total + loss * n, count + n
    return total / count


def test_hetpar_scores_the_directory_as_transformers_does(model_dir, shards):
    done = hetpar("eval", RUN, "--init-hf", str(model_dir), "--batch", str(shards),
                  "--set", "data.global_batch_size=5", "--set", "layout.llm.tp=2")
    assert done.returncode == 0, done.stdout + done.stderr
    ours = float(re.search(r"eval loss: (\S+)", done.stdout).group(1))
    theirs = transformers_loss(model_dir, shards)
    print(f"transformers {theirs:.9g}  hetpar {ours:.9g}  rel diff {abs(theirs - ours) / abs(theirs):.3g}")
    assert abs(theirs - ours) <= 1e-4 * abs(theirs)
    assert "in 1 batch(es) of 5 samples" in done.stdout


def test_hetpar_trains_on_the_directory(model_dir, shards, tmp_path):
    done = hetpar("train", RUN, "--init-hf", str(model_dir), "--set", f"data.files={shards}",
                  "--set", "data.global_batch_size=4", "--set", "run.steps=3", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"training on 5 samples in 3 batch files of {shards}" in done.stdout
    # The files' image_counts name the 2-image sample before any rank starts (the mean, 1, is no more than 1).
    done = hetpar("train", RUN, "--set", f"data.files={shards}", "--set", "data.global_batch_size=4",
                  "--set", "data.images_max=1", "--set", "run.steps=3", "--out", str(tmp_path / "capped"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "part_00001.safetensors: sample 1 holds 2 images, more than data.images_max = 1" in done.stderr, done.stderr
    assert "launching" not in done.stdout + done.stderr


def test_bad_input_exits_two_naming_the_line_and_overwrites_nothing(processor_dir, samples_file, shards, tmp_path):
    before = {p.name: p.stat().st_mtime_ns for p in shards.iterdir()}
    done = batch_files("--processor", processor_dir, "--samples", samples_file, "--out", shards)
    assert done.returncode == 2 and "exists and is not an empty directory" in done.stderr, done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in shards.iterdir()} == before
    broken = samples_file.parent / "broken.jsonl"
    for line, message in (({"text": "<s> <image> a cat", "images": ["gone.png"]}, "image gone.png: no such file"),
                          ({"text": "<s> <image> <image> a cat", "images": ["a.png"]},
                           "2 image placeholders (<image>) but 1 images"),
                          ({"images": []}, "needs \"text\", or \"prompt\" and \"response\"")):
        broken.write_text(json.dumps({"text": "<s> a cat", "images": []}) + "\n" + json.dumps(line) + "\n")
        out = tmp_path / "never"
        done = batch_files("--processor", processor_dir, "--samples", broken, "--out", out)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{broken}:2" in done.stderr and message in done.stderr, done.stderr
        assert not out.exists()
    done = batch_files("--processor", processor_dir, "--samples", samples_file, "--out", tmp_path / "short",
                       "--max-tokens", 20)
    assert done.returncode == 2 and "more than --max-tokens 20" in done.stderr, done.stderr
