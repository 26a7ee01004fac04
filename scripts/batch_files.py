#!/usr/bin/env python3
"""Batch files from samples of text and images, for `hetpar train --set
data.files=DIR` (or data.eval_files, or `hetpar eval --batch DIR`).

Each sample goes through a model's transformers processor (a LLaVA
processor directory: its tokenizer and image processor, read offline), so
the placeholders expand to the image's tokens as the model expects them.

Input, one JSON object a line (paths relative to the samples file):
  {"text": "<image> a red cat", "images": ["cat.png"]}
  {"prompt": "what is this <image>", "response": " a dog", "images": ["dog.png"]}
`text` is the whole sample; or `prompt` and `response`, where the prompt's
tokens carry no loss (an instruction). One placeholder (the processor's
image token) per image, in order.

Output: OUT/part_00000.safetensors, ... of --per-file samples each, in
input order: input_ids and labels [samples, longest sample] (int64; padded
with the pad id and no loss; labels are the ids, unshifted, with -100 on
image tokens, padding and prompt tokens), pixel_values [images, C, H, W]
(float32) and image_counts [samples] (int64: each sample's images, so hetpar
indexes a file's images and checks every sample against data.images_max
without reading its input_ids). OUT must be new or empty; nothing else is written, and nothing
is deleted. Bad input (a missing image, a placeholder count that does not
match, a sample longer than --max-tokens) exits 2 naming the line.
"""
import argparse
import json
import os
import sys
from pathlib import Path

IGNORED = -100


def fail(message):
    print(f"batch_files: {message}", file=sys.stderr)
    sys.exit(2)


def read_samples(path):
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    samples = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{path}:{number}: not JSON ({e.msg})")
        if not isinstance(sample, dict):
            fail(f"{path}:{number}: expected an object")
        has_text, has_pair = "text" in sample, "prompt" in sample and "response" in sample
        if has_text == has_pair:
            fail(f"{path}:{number}: needs \"text\", or \"prompt\" and \"response\"")
        samples.append((number, sample))
    if not samples:
        fail(f"{path}: no sample")
    return samples


def open_images(sample, where, root, image_token, text):
    from PIL import Image
    paths = sample.get("images", [])
    if not isinstance(paths, list):
        fail(f"{where}: \"images\" must be a list of paths")
    if text.count(image_token) != len(paths):
        fail(f"{where}: {text.count(image_token)} image placeholders ({image_token}) but {len(paths)} images")
    images = []
    for p in paths:
        try:
            with Image.open(root / p) as image:
                images.append(image.convert("RGB"))
        except OSError as e:
            fail(f"{where}: image {p}: {e}")
    return images


def encode(processor, text, images):
    out = processor(text=[text], images=images or None, return_tensors="pt")
    return out["input_ids"][0], out.get("pixel_values")


def sample_tensors(processor, sample, where, root, max_tokens):
    """input_ids, labels and pixel_values (or None) of one sample."""
    image_token = processor.image_token
    text = sample["text"] if "text" in sample else sample["prompt"] + sample["response"]
    images = open_images(sample, where, root, image_token, text)
    ids, pixels = encode(processor, text, images)
    labels = ids.clone()
    labels[ids == processor.tokenizer.convert_tokens_to_ids(image_token)] = IGNORED
    if "prompt" in sample:
        prompt = sample["prompt"]
        prompt_ids, _ = encode(processor, prompt, images[:prompt.count(image_token)])
        if len(prompt_ids) > len(ids) or not (ids[:len(prompt_ids)] == prompt_ids).all():
            fail(f"{where}: the prompt's tokens are not the start of the sample's (the tokenizer merges across "
                 "their boundary): end the prompt at a word boundary")
        labels[:len(prompt_ids)] = IGNORED
    if max_tokens and len(ids) > max_tokens:
        fail(f"{where}: {len(ids)} tokens, more than --max-tokens {max_tokens}")
    return ids, labels, pixels


def write_file(path, samples, pad_id, image_shape):
    import torch
    from safetensors.torch import save_file
    longest = max(len(ids) for ids, _, _ in samples)
    ids = torch.full((len(samples), longest), pad_id, dtype=torch.int64)
    labels = torch.full((len(samples), longest), IGNORED, dtype=torch.int64)
    counts = torch.zeros(len(samples), dtype=torch.int64)
    pixels = []
    for row, (i, l, p) in enumerate(samples):
        ids[row, :len(i)] = i
        labels[row, :len(l)] = l
        if p is not None:
            pixels.append(p.to(torch.float32))
            counts[row] = p.shape[0]
    # No image in this file: an empty tensor of the processor's image shape.
    pixel_values = torch.cat(pixels) if pixels else torch.empty((0, *image_shape))
    partial = path.with_name(path.name + ".partial")
    try:
        save_file({"input_ids": ids, "labels": labels, "pixel_values": pixel_values.contiguous(),
                   "image_counts": counts}, str(partial))
        os.replace(partial, path)  # a file is there whole or not at all
    except Exception as e:  # a full disk, a directory gone (safetensors raises its own error type)
        partial.unlink(missing_ok=True)  # this script's own unfinished file, nothing else
        fail(f"writing {path}: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processor", required=True, help="a LLaVA processor directory (transformers, offline)")
    parser.add_argument("--samples", required=True, help="JSONL samples file")
    parser.add_argument("--out", required=True, help="directory for the batch files: new or empty")
    parser.add_argument("--per-file", type=int, default=1024, help="samples a file (default 1024)")
    parser.add_argument("--max-tokens", type=int, default=0, help="refuse a longer sample (llm.seq_len; 0: no limit)")
    args = parser.parse_args()
    if args.per_file < 1:
        fail(f"--per-file must be >= 1, got {args.per_file}")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {out}: exists and is not an empty directory (nothing is overwritten)")
    samples = read_samples(args.samples)
    from transformers import AutoProcessor
    try:
        processor = AutoProcessor.from_pretrained(args.processor, local_files_only=True)
    except (OSError, ValueError) as e:
        fail(f"--processor {args.processor}: {e}")
    if not hasattr(processor, "image_token"):
        fail(f"--processor {args.processor}: not a processor with an image token (a LLaVA processor)")
    size = processor.image_processor.size
    side = (size["height"], size["width"]) if "height" in size else (size["shortest_edge"], size["shortest_edge"])
    image_shape = (3, *side)
    pad_id = processor.tokenizer.pad_token_id or 0
    root = Path(args.samples).resolve().parent
    # What can be checked without the processor, for every sample before any file is written.
    for number, sample in samples:
        text = sample["text"] if "text" in sample else sample["prompt"] + sample["response"]
        paths = sample.get("images", [])
        if not isinstance(paths, list) or text.count(processor.image_token) != len(paths):
            fail(f"{args.samples}:{number}: {text.count(processor.image_token)} image placeholders "
                 f"({processor.image_token}) but {len(paths) if isinstance(paths, list) else 'no list of'} images")
        for p in paths:
            if not (root / p).is_file():
                fail(f"{args.samples}:{number}: image {p}: no such file")
    done, files = [], 0
    out.mkdir(parents=True, exist_ok=True)
    for number, sample in samples:
        where = f"{args.samples}:{number}"
        if files:
            where += f" (the {files} files before it stay in {out})"
        done.append(sample_tensors(processor, sample, where, root, args.max_tokens))
        if len(done) == args.per_file:
            write_file(out / f"part_{files:05d}.safetensors", done, pad_id, image_shape)
            files, done = files + 1, []
    if done:
        write_file(out / f"part_{files:05d}.safetensors", done, pad_id, image_shape)
        files += 1
    print(f"wrote {len(samples)} samples in {files} batch files to {out}/")


if __name__ == "__main__":
    main()
