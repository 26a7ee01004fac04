"""Peer benchmark: one training step (forward, backward, AdamW step) of the
same LLaVA-shaped model in hetpar's C++ trainer and in transformers' eager
PyTorch, on one CPU rank, fp32, at a fixed thread count.

For each thread count it runs --rounds rounds; a round runs hetpar for
warmup + steps steps and transformers for warmup + steps steps, each in a
fresh process, hetpar first in even rounds and transformers first in odd
ones, so slow drifts of the machine hit both sides alike. Warm-up steps are
left out. Before each round it measures an fp32 GEMM rate with torch at the
same thread count; the best of these is the peak both MFUs use. The FLOPs
of a step are hetpar's model-FLOPs count (steps.jsonl `flops`), used for
both sides, which run the same model on the same shapes.

    python bench/peer/peer_bench.py --rounds 3 --threads 1,2
    python bench/peer/peer_bench.py --smoke
"""
import argparse
import json
import math
import os
import hashlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # write nothing outside --out, not even a __pycache__ here
import transformers_step  # noqa: E402  (the shape flags and the step both sides share)

SMOKE_SHAPES = dict(vision_hidden=32, vision_layers=1, vision_heads=2, vision_mlp=64, image_size=16, patch_size=8,
                    channels=3, llm_hidden=32, llm_layers=1, llm_heads=2, llm_kv_heads=1, llm_ffn=64, vocab=64,
                    seq_len=16, batch=2)


# The file that says this benchmark made its --out: it writes again only into
# a folder that is new, empty or marked so (it never deletes anything).
OUT_MARKER = ".hetpar-peer-bench"


def out_problem(out):
    """None when the benchmark may write into `out`, else why not."""
    if not out.exists():
        return None
    if not out.is_dir():
        return f"--out {out} is not a folder"
    if (out / OUT_MARKER).is_file():
        return None
    entries = sorted(p.name for p in out.iterdir())
    if entries:
        return (f"--out {out} holds files this benchmark did not write (first: {entries[0]}); "
                f"name a new or empty folder")
    return None


class BenchError(Exception):
    pass


class OutRefused(BenchError):
    """Bad input: exit 2, nothing written."""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    transformers_step.add_model_flags(parser)
    parser.add_argument("--threads", default="1", help="intra-op threads, or a list such as 1,2 (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per thread count (default 3)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of each run (default 2)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    parser.add_argument("--hetpar", default=str(REPO / "build" / "hetpar"), help="hetpar binary (default build/hetpar)")
    parser.add_argument("--python", default=sys.executable, help="python that runs transformers (default this one)")
    parser.add_argument("--out", help="folder for run files, outputs and peer_bench.json: new, empty, or an earlier "
                                      "run's (default a new temp folder; make bench-peer: results/bench/peer)")
    parser.add_argument("--gemm-size", type=int, default=512, help="n of the n^3 fp32 GEMM of the peak (default 512)")
    parser.add_argument("--gemm-seconds", type=float, default=1.0, help="seconds per GEMM measurement (default 1)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, 1 round of 1 warm-up + 1 step, 1 thread: checks that both sides run, "
                             "train the same model and give finite losses; prints no timings")
    a = parser.parse_args()
    if a.smoke:
        for key, value in SMOKE_SHAPES.items():
            setattr(a, key, value)
        a.rounds, a.warmup, a.steps, a.threads = 1, 1, 1, "1"
    try:
        a.thread_counts = [int(t) for t in a.threads.split(",")]
    except ValueError:
        parser.error(f"--threads {a.threads!r}: expected integers separated by commas")
    if min(a.thread_counts) < 1 or a.rounds < 1 or a.steps < 1 or a.warmup < 0:
        parser.error("--threads, --rounds and --steps must be >= 1, --warmup >= 0")
    transformers_step.check_shapes(a)
    return a


def run_file(a, threads):
    """hetpar's run file for these shapes: one rank, one micro-batch of the
    whole batch, exactly one image per sample, constant learning rate."""
    return f"""# Written by bench/peer/peer_bench.py
[run]
name = "peer_bench"
seed = {a.seed}
steps = {a.warmup + a.steps}
timing_warmup_steps = {a.warmup}

[encoder]
image_size = {a.image_size}
patch_size = {a.patch_size}
channels = {a.channels}
hidden = {a.vision_hidden}
layers = {a.vision_layers}
heads = {a.vision_heads}
mlp_hidden = {a.vision_mlp}
frozen = false

[llm]
vocab_size = {a.vocab}
hidden = {a.llm_hidden}
layers = {a.llm_layers}
heads = {a.llm_heads}
kv_heads = {a.llm_kv_heads}
ffn_hidden = {a.llm_ffn}
seq_len = {a.seq_len}

[data]
global_batch_size = {a.batch}
micro_batch_size = {a.batch}
images_min = 1
images_max = 1

[optim]
lr = {a.lr!r}
min_lr = {a.lr!r}
warmup_steps = 0
weight_decay = {a.weight_decay!r}
beta1 = {a.beta1!r}
beta2 = {a.beta2!r}
eps = {a.eps!r}
grad_clip = {a.grad_clip!r}

[layout]
placement = "uniform"

[layout.encoder]
tp = 1
cp = 1
pp = 1
dp = 1

[layout.llm]
tp = 1
cp = 1
pp = 1
dp = 1

[runtime]
intra_op_threads = {threads}
"""


def thread_env(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_process(label, cmd, cwd, threads, timeout):
    """Runs one side in a fresh process in cwd; its output goes to cwd/label.log."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(cmd, cwd=cwd, env=thread_env(threads), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{label} did not finish in {timeout} s: {' '.join(map(str, cmd))}")
    except OSError as e:
        raise BenchError(f"{label} could not start: {e}")
    Path(cwd, f"{label}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise BenchError(f"{label} exited {done.returncode}: {' '.join(map(str, cmd))}\n{tail}")
    return done.stdout


def run_hetpar(a, run_toml, rdir, threads, timeout):
    out = rdir / "hetpar"
    stdout = run_process("hetpar", [a.hetpar, "train", str(run_toml), "--out", str(out)], rdir, threads, timeout)
    lines = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    if len(lines) != a.warmup + a.steps:
        raise BenchError(f"hetpar wrote {len(lines)} steps to {out}/steps.jsonl, expected {a.warmup + a.steps}")
    losses = [line["loss"] if isinstance(line["loss"], (int, float)) else math.nan for line in lines]
    if not all(math.isfinite(x) for x in losses):
        raise BenchError(f"hetpar: a loss is not finite: {losses}")
    flops = {line["flops"] for line in lines}
    if len(flops) != 1:
        raise BenchError(f"hetpar: FLOPs differ between steps ({sorted(flops)}); expected one image per sample")
    timed = [line for line in lines if line["step"] > a.warmup]
    summary = json.loads((out / "summary.json").read_text())
    trainable = re.search(r"(\d+) trainable parameters", stdout)
    return {"step_seconds": [line["step_seconds"] for line in timed], "losses": losses, "flops": flops.pop(),
            "phases": {k: statistics.median(line["phases"][k] for line in timed) for k in timed[0]["phases"]},
            "summary": summary, "trainable_parameters": int(trainable.group(1)) if trainable else None}


def run_transformers(a, rdir, threads, timeout):
    flags = []
    for name, _, _ in transformers_step.SHAPE_FLAGS + transformers_step.OPTIM_FLAGS:
        value = getattr(a, name.replace("-", "_"))
        flags += ["--" + name, repr(value) if isinstance(value, float) else str(value)]
    cmd = [a.python, str(HERE / "transformers_step.py"), *flags, "--seed", str(a.seed), "--threads", str(threads),
           "--warmup", str(a.warmup), "--steps", str(a.steps)]
    stdout = run_process("transformers", cmd, rdir, threads, timeout)
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise BenchError(f"transformers printed no JSON result line; see {rdir}/transformers.log")
    if not result["losses_finite"]:
        raise BenchError(f"transformers: a loss is not finite: {result['losses']}")
    if result["threads"] != threads:
        raise BenchError(f"transformers ran with {result['threads']} threads, asked for {threads}")
    return result


def gemm_gflops(threads, n, seconds):
    """fp32 GEMM rate of torch at this thread count, GFLOP/s."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, y = torch.rand(n, n), torch.rand(n, n)
        z = torch.mm(x, y)
        iterations, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds or iterations < 3:
            torch.mm(x, y, out=z)
            iterations += 1
        return 2.0 * n ** 3 * iterations / elapsed / 1e9
    finally:
        torch.set_num_threads(previous)


def check_same_model(a, het, hf):
    """Both sides must train the same parameters on the same targets."""
    notes = []
    hf_trained = hf["parameters"] - hf["parameters_without_grad"]
    if het["trainable_parameters"] is None:
        notes.append("hetpar's log did not state its trainable parameter count: not compared")
    elif het["trainable_parameters"] != hf_trained:
        raise BenchError(f"not the same model: hetpar trains {het['trainable_parameters']} parameters, "
                         f"transformers {hf_trained}")
    expected_targets = a.batch * (a.seq_len - 1 - transformers_step.tokens_per_image(a))
    if hf["target_tokens"] != expected_targets:
        raise BenchError(f"transformers' batch has {hf['target_tokens']} target tokens, hetpar's {expected_targets}")
    return notes


def flat_config(model):
    """The model's config as flat dotted keys, without bookkeeping keys."""
    ignore = {"_name_or_path", "architectures", "dtype", "torch_dtype", "transformers_version", "use_cache"}
    flat = {}
    for key, value in model.config.to_dict().items():
        if isinstance(value, dict) and key.endswith("_config"):
            flat.update({f"{key}.{k}": v for k, v in value.items() if k not in ignore})
        elif key not in ignore:
            flat[key] = value
    return flat


def check_export(a, run_toml, cdir, threads, timeout):
    """hetpar writes its model of this run file as a transformers LLaVA
    directory. The model transformers_step builds from the flags must have
    the same config, take exactly those tensors and, with them, give the
    same loss as transformers' own loading of that directory."""
    from safetensors.torch import load_file
    from transformers import LlavaForConditionalGeneration
    from transformers.utils import logging

    logging.disable_progress_bar()
    export = cdir / "hetpar_export"
    run_process("hetpar", [a.hetpar, "train", str(run_toml), "--set", "run.steps=1", "--out", str(cdir / "hetpar"),
                           "--save-hf", str(export)], cdir, threads, timeout)
    torch.set_num_threads(threads)
    mine = transformers_step.build_model(a)
    theirs = LlavaForConditionalGeneration.from_pretrained(str(export), dtype=torch.float32)
    ours, exported = flat_config(mine), flat_config(theirs)
    diffs = {k: (ours.get(k), exported.get(k)) for k in ours.keys() | exported.keys() if ours.get(k) != exported.get(k)}
    if diffs:
        raise BenchError(f"not the same model: config keys differ (transformers_step, hetpar's export): {diffs}")
    tensors = load_file(str(export / "model.safetensors"))
    missing, unexpected = mine.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise BenchError(f"not the same model: tensors missing {missing}, unexpected {unexpected}")
    ids, labels, pixels = transformers_step.build_batch(a, torch.Generator().manual_seed(a.seed))
    with torch.no_grad():
        losses = [m.eval()(input_ids=ids, pixel_values=pixels, labels=labels, use_cache=False).loss.item()
                  for m in (mine, theirs)]
    if not math.isfinite(losses[0]) or abs(losses[0] - losses[1]) > 1e-6 * abs(losses[1]):
        raise BenchError(f"not the same model: with hetpar's weights the loss is {losses[0]}, "
                         f"transformers loading hetpar's export gives {losses[1]}")
    return {"tensors": len(tensors), "loss": losses[0]}


def median(xs):
    return statistics.median(xs)


def main():
    a = parse_args()
    out_root = Path(a.out).resolve() if a.out else Path(tempfile.mkdtemp(prefix="peer_bench_"))
    if problem := out_problem(out_root):
        raise OutRefused(problem)
    if not Path(a.hetpar).is_file():
        raise BenchError(f"no hetpar binary at {a.hetpar} (build it, or pass --hetpar)")
    # Absolute: each side runs in a folder of its own.
    a.hetpar = str(Path(a.hetpar).resolve())
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / OUT_MARKER).write_text("written by bench/peer/peer_bench.py\n")
    timeout = 120 if a.smoke else 3600
    cores = os.cpu_count() or 1
    report = {"args": {k: v for k, v in vars(a).items() if k != "thread_counts"}, "cores": cores,
              "torch_version": torch.__version__, "results": []}
    if not a.smoke:
        # Every round runs this copy: a rebuild during the benchmark cannot mix two binaries.
        copy = out_root / "hetpar"
        shutil.copy2(a.hetpar, copy)
        report["hetpar_binary"] = {"source": a.hetpar, "copy": str(copy),
                                   "sha256": hashlib.sha256(copy.read_bytes()).hexdigest()}
        a.hetpar = str(copy)
    copied = "" if a.smoke else f" (run as its copy {a.hetpar})"
    print(f"peer benchmark: hetpar {report['args']['hetpar']}{copied} vs transformers ({a.python}); out {out_root}")
    print(f"shapes: vision {a.vision_hidden}x{a.vision_layers} (heads {a.vision_heads}, mlp {a.vision_mlp}, image "
          f"{a.image_size}, patch {a.patch_size}: {transformers_step.tokens_per_image(a)} tokens/image), llm "
          f"{a.llm_hidden}x{a.llm_layers} (heads {a.llm_heads}/{a.llm_kv_heads}, ffn {a.llm_ffn}, vocab {a.vocab}, "
          f"seq {a.seq_len}), batch {a.batch} with 1 image each; fp32")
    print(f"AdamW lr {a.lr} (constant) betas ({a.beta1}, {a.beta2}) eps {a.eps} weight decay {a.weight_decay} on "
          f"matrices only; grad clip {a.grad_clip or 'off'}; transformers side: torch.optim.AdamW {a.adamw}")
    print(f"{a.rounds} round(s) x ({a.warmup} warm-up + {a.steps} timed steps) per side and thread count")

    check_dir = out_root / "model_check"
    check_dir.mkdir(parents=True, exist_ok=True)
    (check_dir / "run.toml").write_text(run_file(a, a.thread_counts[0]))
    report["model_check"] = check_export(a, check_dir / "run.toml", check_dir, a.thread_counts[0], timeout)
    print(f"model check: the model built from these flags has the config of hetpar's export of this run file, "
          f"takes all {report['model_check']['tensors']} of its tensors and then gives the same loss "
          f"({report['model_check']['loss']:.6f}) as transformers loading that export")

    for threads in a.thread_counts:
        if threads > cores:
            print(f"warning: {threads} threads on {cores} cores: oversubscribed, timings are not meaningful")
        tdir = out_root / f"threads{threads}"
        tdir.mkdir(parents=True, exist_ok=True)
        run_toml = tdir / "run.toml"
        run_toml.write_text(run_file(a, threads))
        sides = {"hetpar": [], "transformers": []}
        gemm, order = [], []
        for r in range(a.rounds):
            if not a.smoke:
                gemm.append(gemm_gflops(threads, a.gemm_size, a.gemm_seconds))
            names = ["hetpar", "transformers"] if r % 2 == 0 else ["transformers", "hetpar"]
            order.append(names)
            for name in names:
                rdir = tdir / f"round{r}"
                if name == "hetpar":
                    sides[name].append(run_hetpar(a, run_toml, rdir, threads, timeout))
                else:
                    sides[name].append(run_transformers(a, rdir, threads, timeout))
                print(f"  threads {threads} round {r + 1}/{a.rounds} {name:<12} losses "
                      f"{sides[name][-1]['losses'][0]:.4f} .. {sides[name][-1]['losses'][-1]:.4f}"
                      + ("" if a.smoke else
                         f"  median {median(sides[name][-1]['step_seconds']) * 1e3:.1f} ms/step"), flush=True)
        notes = check_same_model(a, sides["hetpar"][0], sides["transformers"][0])
        for note in notes:
            print(f"note: {note}")
        flops = sides["hetpar"][0]["flops"]
        entry = {"threads": threads, "order": order, "notes": notes, "flops_per_step": flops,
                 "flops_source": "hetpar's steps.jsonl `flops`, used for both sides: same model, same shapes",
                 "hetpar_torch_version": sides["hetpar"][0]["summary"].get("torch_version"),
                 "transformers_torch_version": sides["transformers"][0]["torch_version"],
                 "transformers_version": sides["transformers"][0]["transformers_version"],
                 "hetpar_trainable_parameters": sides["hetpar"][0]["trainable_parameters"],
                 "hetpar_encoder_params": sides["hetpar"][0]["summary"]["encoder_params"],
                 "hetpar_llm_params": sides["hetpar"][0]["summary"]["llm_params"],
                 "transformers_parameters": sides["transformers"][0]["parameters"],
                 "transformers_parameters_without_grad": sides["transformers"][0]["parameters_without_grad"],
                 "transformers_names_without_grad": sides["transformers"][0]["names_without_grad"],
                 "hetpar_runs": sides["hetpar"], "transformers_runs": sides["transformers"]}
        if not a.smoke:
            peak = max(gemm) * 1e9
            entry["gemm_gflops"] = gemm
            entry["gemm_peak_flops"] = peak
            entry["gemm"] = f"torch.mm fp32 {a.gemm_size}^3, {threads} thread(s), best of {len(gemm)} x {a.gemm_seconds} s"
            entry["hetpar_peak_flops_own"] = sides["hetpar"][0]["summary"].get("peak_flops_per_rank")
            for name, runs in sides.items():
                seconds = [s for run in runs for s in run["step_seconds"]]
                m = median(seconds)
                entry[name] = {"median_s": m, "min_s": min(seconds), "max_s": max(seconds),
                               "round_medians_s": [median(run["step_seconds"]) for run in runs],
                               "mfu": flops / (m * peak), "samples": len(seconds)}
            entry["ratio_hetpar_over_transformers"] = entry["hetpar"]["median_s"] / entry["transformers"]["median_s"]
            # Each round's two runs are neighbours in time: their ratio cancels slow drifts of the machine.
            entry["round_ratios"] = [h / t for h, t in zip(entry["hetpar"]["round_medians_s"],
                                                           entry["transformers"]["round_medians_s"])]
            entry["paired_ratio_median"] = median(entry["round_ratios"])
        report["results"].append(entry)

    report_path = out_root / "peer_bench.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    first = report["results"][0]
    trained = first["hetpar_trainable_parameters"]
    rest = "" if trained is None else f" + {trained - first['hetpar_encoder_params'] - first['hetpar_llm_params']} other"
    print(f"parameters: transformers {first['transformers_parameters']} in total, of which "
          f"{first['transformers_parameters_without_grad']} get no gradient "
          f"({', '.join(first['transformers_names_without_grad']) or 'none'}); hetpar trains {trained} "
          f"(summary.json encoder_params {first['hetpar_encoder_params']} + llm_params {first['hetpar_llm_params']}"
          f"{rest}: the projector)")
    print(f"versions: transformers {first['transformers_version']} on torch {first['transformers_torch_version']}; "
          f"hetpar built against torch {first['hetpar_torch_version']}")
    if a.smoke:
        print(f"smoke ok: both sides ran the same model and gave finite losses; no timings reported. "
              f"Results in {report_path}")
        return 0
    print(f"FLOPs per step: {first['flops_per_step']:.4e} ({first['flops_source']})")
    header = (f"{'threads':>7} | {'hetpar ms':>9} | {'transformers ms':>15} | {'hetpar/transformers':>19} | "
              f"{'hetpar MFU':>10} | {'transformers MFU':>16} | {'GEMM peak GFLOP/s':>17}")
    print(header)
    print("-" * len(header))
    for e in report["results"]:
        print(f"{e['threads']:>7} | {e['hetpar']['median_s'] * 1e3:>9.1f} | {e['transformers']['median_s'] * 1e3:>15.1f}"
              f" | {e['ratio_hetpar_over_transformers']:>19.3f} | {100 * e['hetpar']['mfu']:>9.1f}% | "
              f"{100 * e['transformers']['mfu']:>15.1f}% | {e['gemm_peak_flops'] / 1e9:>17.1f}")
    for e in report["results"]:
        rounds = lambda side: ", ".join(f"{x * 1e3:.1f}" for x in e[side]["round_medians_s"])
        print(f"threads {e['threads']}: per-round medians ms: hetpar [{rounds('hetpar')}], transformers "
              f"[{rounds('transformers')}]; GEMM GFLOP/s per round [{', '.join(f'{g:.1f}' for g in e['gemm_gflops'])}];"
              f" hetpar's own peak {e['hetpar_peak_flops_own'] / 1e9:.1f}")
        print(f"threads {e['threads']}: ratio per round [{', '.join(f'{x:.3f}' for x in e['round_ratios'])}], "
              f"median {e['paired_ratio_median']:.3f}")
    print("median over all timed steps of all rounds; ratio < 1: hetpar is faster. MFU = FLOPs / (median s x peak)")
    print(f"results in {report_path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"peer_bench: error: {e}", file=sys.stderr)
        sys.exit(2 if isinstance(e, OutRefused) else 1)
