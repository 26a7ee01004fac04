#!/usr/bin/env python3
"""Figures and a summary table for a hetpar reproduction sweep.

Usage: plot_results.py RESULTS_DIR [--out DIR]

Reads RESULTS_DIR/results.jsonl (one record per run: the sweep points and their
uniform baselines; the repeats of `sweep --repeat K` pooled to their medians) and writes tflops_per_gpu, speedup_vs_encoder, loss_curves and
phase_breakdown as PNG and SVG, plus summary.md, into DIR (default
RESULTS_DIR/plots). Prints every written path. Exits 2 when there is nothing to plot.
"""
import argparse
import json
import math
import re
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter  # noqa: E402

# Text stays text in the SVGs (searchable, small) and ids are stable between runs.
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "hetpar", "font.size": 9})

# One colour per placement and per phase in every figure, so a reader learns them once.
PLACEMENTS = ["uniform", "colocated", "non-colocated"]
PLACEMENT_COLORS = {"uniform": "#8c8c8c", "colocated": "#1f77b4", "non-colocated": "#ff7f0e"}
OTHER_COLOR = "#2ca02c"
PHASES = ["encoder_forward", "encoder_backward", "boundary_forward", "boundary_backward",
          "llm_forward", "llm_backward", "grad_sync", "optimizer", "wait", "pipeline_wait"]
PHASE_COLORS = dict(zip(PHASES, ["#9ecae1", "#3182bd", "#a1d99b", "#31a354", "#fdae6b",
                                 "#e6550d", "#bcbddc", "#756bb1", "#d9d9d9", "#f0f0f0"]))
MAX_LOSS_COLUMNS = 8
SPEEDUP_FIELDS = {"tflops_per_gpu": "speedup_tflops", "tokens_per_second": "speedup_tokens"}


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def load_runs(results_dir):
    """The ok records in file (= run) order, plus counts of what was skipped."""
    path = results_dir / "results.jsonl"
    if not path.is_file():
        fail(f"{path} not found (expected one JSON record per run)")
    runs, not_ok, unparsable = [], 0, 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            unparsable += 1
        elif record.get("status") != "ok":
            not_ok += 1
        else:
            runs.append(record)
    if not runs:
        fail(f"{path} has no usable records ({not_ok} with status != ok, {unparsable} unparsable lines)")
    return runs, not_ok, unparsable


REPEAT_SUFFIX = re.compile(r"r\d+$")
POOLED_FIELDS = ["tflops_per_gpu", "tokens_per_second", "image_tokens_per_second", "samples_per_second",
                 "step_seconds_median", "mfu", "peak_memory_mib"]


def finite_values(runs, field):
    return [num(r.get(field)) for r in runs if not math.isnan(num(r.get(field)))]


def pool_repeats(runs):
    """One record per run: the repeats of `sweep --repeat K` (ids p001r2, b001r3 ...)
    become their first measurement with the median of each figure over the repeats,
    and `repeats` saying how many there were; speed-ups are left to be taken against
    the pooled baseline, the rounds' own kept as a range. Figures then show one bar
    per point."""
    groups = {}
    for r in runs:
        groups.setdefault(REPEAT_SUFFIX.sub("", str(r.get("run_id"))), []).append(r)
    pooled = []
    for run_id, group in groups.items():
        group.sort(key=lambda r: int(r.get("repeat") or 1))
        first = dict(group[0], run_id=run_id, repeats=len(group))
        if first.get("baseline_id"):
            first["baseline_id"] = REPEAT_SUFFIX.sub("", str(first["baseline_id"]))
        for field in POOLED_FIELDS:
            values = finite_values(group, field)
            if values:
                first[field] = float(np.median(values))
        # As report.md has it: the pooled figure over the pooled baseline's
        # (speedup() recomputes it), with the range of each round's speed-up
        # over its own round's baseline beside it.
        for field in SPEEDUP_FIELDS.values() if len(group) > 1 else ():
            first[field] = None
            values = finite_values(group, field)
            if len(values) > 1:
                first[field + "_range"] = (min(values), max(values))
        phases = [r.get("phases") or {} for r in group]
        first["phases"] = {name: float(np.median([p[name] for p in phases if name in p]))
                           for name in {n for p in phases for n in p}}
        pooled.append(first)
    return pooled


def num(value):
    """A float, or nan for a missing/null field, so a plot shows a gap instead of failing."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def is_point(run):
    return run.get("role") != "baseline"


def color(run):
    return PLACEMENT_COLORS.get(run.get("placement"), OTHER_COLOR)


def placement_rank(placement):
    return PLACEMENTS.index(placement) if placement in PLACEMENTS else len(PLACEMENTS)


def speedup(run, by_id, metric):
    """A point's speedup over its baseline: the recorded value, else recomputed from the baseline."""
    if not is_point(run):
        return 1.0
    if run.get(SPEEDUP_FIELDS[metric]) is not None:
        return num(run[SPEEDUP_FIELDS[metric]])
    base = by_id.get(run.get("baseline_id"))
    return num(run.get(metric)) / num(base.get(metric)) if base and num(base.get(metric)) else math.nan


def compact(layout):
    """'tp1.cp1.pp1.dp2' -> 'dp2', 'tp2.cp1.pp1.dp1.sp' -> 'tp2.sp': only the
    dimensions above 1 (and sequence parallelism) matter to a reader."""
    text = str(layout or "")
    dims = re.findall(r"([a-z]+)(\d+)", text)
    kept = [f"{d}{n}" for d, n in dims if n != "1"] + (["sp"] if text.endswith(".sp") else [])
    return ".".join(kept) or ("1 rank" if dims else "?")


def bar_label(run):
    if not is_point(run):
        return f"L {compact(run.get('layout_llm'))}"  # the encoder inherits the LLM's layout
    return f"E {compact(run.get('layout_encoder'))}\nL {compact(run.get('layout_llm'))}"


def encoder_order(runs):
    """Encoder names from smallest to largest encoder."""
    params = {}
    for r in runs:
        params.setdefault(str(r.get("encoder_name")), num(r.get("encoder_params")))
    return sorted(params, key=lambda e: (math.inf if math.isnan(params[e]) else params[e], e)), params


def human(count):
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= div:
            return f"{count / div:.3g}{suffix}"
    return f"{count:.0f}"


def fig_tflops(runs, by_id):
    encoders, _ = encoder_order(runs)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.8 * len(runs) + 1.2 * len(encoders)), 5))
    x, ticks, labels, tops = 0.0, [], [], []
    for enc in encoders:
        group = sorted((r for r in runs if str(r.get("encoder_name")) == enc),
                       key=lambda r: (placement_rank(r.get("placement")), is_point(r),
                                      str(r.get("layout_encoder")), str(r.get("layout_llm"))))
        start = x
        for r in group:
            height = num(r.get("tflops_per_gpu"))
            ax.bar(x, height, 0.8, color=color(r), edgecolor="black", linewidth=0.5)
            tops.append(height)
            s = speedup(r, by_id, "tflops_per_gpu")
            if is_point(r) and not (math.isnan(s) or math.isnan(height)):
                ax.annotate(f"{s:.2f}×", (x, height), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8, fontweight="bold")
            ticks.append(x)
            labels.append(bar_label(r))
            x += 1
        # The encoder name sits under its group's layout tick labels.
        ax.annotate(enc, ((start + x - 1) / 2, 0), xycoords=("data", "axes fraction"),
                    xytext=(0, -34), textcoords="offset points", ha="center", va="top",
                    fontsize=10, fontweight="bold")
        x += 0.8  # gap between encoder groups
    ax.set_xticks(ticks, labels, fontsize=7)
    finite = [t for t in tops if not math.isnan(t)]
    ax.set_ylim(0, 1.15 * max(finite) if finite and max(finite) > 0 else 1)
    ax.set_ylabel("achieved TFLOPS per GPU")
    ax.set_xlabel("encoder; per bar E/L = encoder/LLM layout (dims > 1)", labelpad=24)
    ax.set_title("Throughput per GPU by encoder and placement (label: speedup vs uniform baseline)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=[Patch(color=PLACEMENT_COLORS.get(p, OTHER_COLOR), label=f"{p} (baseline)" if p == "uniform" else str(p))
                       for p in sorted({r.get("placement") for r in runs}, key=placement_rank)],
              title="placement", loc="upper left", fontsize=8)
    return fig


def fig_speedup(runs, by_id):
    encoders, params = encoder_order(runs)
    # Place encoders by size when every size is known, else evenly.
    sized = all(params[e] > 0 for e in encoders)  # nan compares False
    xs = {e: params[e] if sized else i + 1 for i, e in enumerate(encoders)}
    points = [r for r in runs if is_point(r)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharex=True)
    for ax, metric, title in ((axes[0], "tflops_per_gpu", "TFLOPS/GPU speedup"),
                              (axes[1], "tokens_per_second", "tokens/s speedup")):
        ax.axhline(1.0, ls="--", color=PLACEMENT_COLORS["uniform"], label="uniform baseline")
        for placement in sorted({r.get("placement") for r in points}, key=placement_rank):
            line, ranges = [], []
            for e in encoders:  # best point per encoder + placement
                values = [(speedup(r, by_id, metric), r) for r in points
                          if str(r.get("encoder_name")) == e and r.get("placement") == placement]
                values = [(v, r) for v, r in values if not math.isnan(v)]
                if values:
                    best, run = max(values, key=lambda vr: vr[0])
                    line.append((xs[e], best))
                    low, high = run.get(SPEEDUP_FIELDS[metric] + "_range") or (best, best)
                    ranges.append((max(best - low, 0.0), max(high - best, 0.0)))
            if line:
                lx, ly = zip(*line)
                colour = PLACEMENT_COLORS.get(placement, OTHER_COLOR)
                ax.plot(lx, ly, "o-", color=colour, label=placement)
                if any(lo or hi for lo, hi in ranges):  # repeats: the rounds' range
                    ax.errorbar(lx, ly, yerr=np.array(ranges).T, fmt="none", ecolor=colour, capsize=3, alpha=0.7)
                for px, py in line:
                    ax.annotate(f"{py:.2f}", (px, py), xytext=(0, 5), textcoords="offset points",
                                ha="center", fontsize=7)
        if not points:
            ax.text(0.5, 0.5, "no sweep points (baselines only)", transform=ax.transAxes, ha="center")
        ax.set_title(title)
        ax.set_ylabel("speedup over uniform baseline (×)")
        ax.set_xlabel("encoder size (parameters)" if sized else "encoder")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    values = [xs[e] for e in encoders]
    if sized and max(values) / min(values) > 10:
        axes[0].set_xscale("log")
    names = [f"{e}\n{human(params[e])}" if sized else e for e in encoders]
    for ax in axes:
        ax.minorticks_off()
        ax.set_xticks(values, names, fontsize=8)
        ax.margins(x=0.08, y=0.12)
    repeated = any(r.get("repeats", 1) > 1 for r in points)
    fig.suptitle("Speedup of heterogeneous layouts over the uniform baseline, by encoder size"
                 + (" (pooled over the rounds; bars: the rounds' own range)" if repeated else ""))
    fig.tight_layout()
    return fig


def read_losses(results_dir, run, key="loss"):
    """{step: loss} from a run's steps.jsonl (key "eval_loss": its held-out
    evaluations only); None when it cannot be read."""
    if not run or not run.get("run_dir"):
        return None
    try:
        lines = (results_dir / run["run_dir"] / "steps.jsonl").read_text().splitlines()
    except OSError:
        return None
    losses = {}
    for line in lines:
        try:
            record = json.loads(line)
            if key in record:
                losses[int(record["step"])] = float(record[key])
        except (ValueError, KeyError, TypeError):
            continue
    return losses


def fig_loss_curves(runs, by_id, results_dir):
    points = [r for r in runs if is_point(r)][:MAX_LOSS_COLUMNS]
    cols = max(1, len(points))
    fig, axes = plt.subplots(2, cols, figsize=(3.4 * cols + 0.6, 6.2), squeeze=False)
    if not points:
        axes[0, 0].text(0.5, 0.5, "no sweep points (baselines only)", ha="center")
    for col, point in enumerate(points):
        top, bottom = axes[0, col], axes[1, col]
        base = by_id.get(point.get("baseline_id"))
        ours, theirs = read_losses(results_dir, point), read_losses(results_dir, base)
        rel_diff = num(point.get("loss_max_rel_diff"))
        parity = {True: "parity ok", False: "PARITY FAILED"}.get(point.get("loss_parity_ok"), "")
        eval_diff = num(point.get("eval_loss_max_rel_diff"))
        held_out = f", held-out {eval_diff:.1e}" if point.get("eval_loss_max_rel_diff") is not None else ""
        top.set_title(textwrap.fill(str(point.get("label") or point.get("run_id")), 34)
                      + f"\nmax rel diff {rel_diff:.1e}{held_out} {parity}", fontsize=8)
        # The baseline is drawn wide underneath so it stays visible where the curves coincide.
        for losses, name, width, c in ((theirs, "uniform baseline", 4.0, PLACEMENT_COLORS["uniform"]),
                                       (ours, "point", 1.3, color(point))):
            if losses:
                steps = sorted(losses)
                top.plot(steps, [losses[s] for s in steps], color=c, label=name, lw=width, alpha=0.9)
        # Held-out losses (run.eval_every) as markers at the steps they were evaluated after.
        for run, name, marker, size, c in ((base, "baseline held-out", "D", 7, PLACEMENT_COLORS["uniform"]),
                                           (point, "point held-out", "x", 6, color(point))):
            held = read_losses(results_dir, run, "eval_loss")
            if held:
                steps = sorted(held)
                top.plot(steps, [held[s] for s in steps], marker, ms=size, color=c, ls="none", label=name)
        if ours or theirs:
            top.legend(fontsize=7)
        for ax in (top, bottom):
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        common = sorted(set(ours or {}) & set(theirs or {}))
        if not common:
            missing = "point" if not ours else "baseline" if not theirs else "common"
            bottom.text(0.5, 0.5, f"no {missing} steps to compare", transform=bottom.transAxes,
                        ha="center", va="center")
            continue
        a, b = np.array([ours[s] for s in common]), np.array([theirs[s] for s in common])
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(a == b, 0.0, np.abs(a - b) / np.abs(b))
        shown = np.isfinite(rel) & (rel > 0)  # log scale cannot show exact agreement
        if not shown.any():
            bottom.text(0.5, 0.5, f"identical to baseline:\n|a−b|/|b| = 0 at all {len(common)} steps",
                        transform=bottom.transAxes, ha="center", va="center", fontsize=8)
            bottom.set_xlim(common[0] - 0.5, common[-1] + 0.5)
            bottom.set_yticks([])  # nothing to scale: a bare axis beats a fake 0..1 one
            continue
        bottom.semilogy(np.array(common)[shown], rel[shown], "o-", ms=3, color=color(point))
        # Whole decades, so the axis always has labelled major ticks even for a narrow range.
        lo, hi = np.floor(np.log10(rel[shown].min())), np.ceil(np.log10(rel[shown].max()))
        bottom.set_ylim(10 ** lo, 10 ** max(hi, lo + 1))
        bottom.yaxis.set_minor_formatter(NullFormatter())
        bottom.set_xlim(common[0] - 0.3, common[-1] + 0.3)
        if (~shown).sum():
            bottom.text(0.02, 0.95, f"exactly equal at {(~shown).sum()} of {len(common)} steps (not shown)",
                        transform=bottom.transAxes, va="top", fontsize=7)
        bottom.grid(alpha=0.3)
    axes[0, 0].set_ylabel("loss")
    axes[1, 0].set_ylabel("|a−b| / |b|  (point vs baseline)")
    fig.suptitle("Loss parity: each point against its uniform baseline")
    fig.tight_layout()
    return fig


def fig_phases(runs):
    seen = {k for r in runs for k in (r.get("phases") or {})}
    phases = PHASES + sorted(seen - set(PHASES))
    extra_colors = plt.get_cmap("tab20").colors
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(runs) + 1.6))
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    for i, phase in enumerate(phases):
        values = np.nan_to_num([num((r.get("phases") or {}).get(phase, 0)) for r in runs])
        if not values.any():
            continue  # keep the legend to what is drawn
        ax.barh(y, values, left=left, height=0.7, label=phase.replace("_", " "),
                color=PHASE_COLORS.get(phase, extra_colors[i % len(extra_colors)]))
        left += values
    # The measured step time shows how much the phases leave unexplained.
    ax.plot([num(r.get("step_seconds_median")) for r in runs], y, "k|", ms=14, mew=2,
            label="measured step (median)")
    ax.set_yticks(y, [f"{r.get('run_id') or '?'}: {r.get('label') or ''}" for r in runs], fontsize=8)
    for tick, r in zip(ax.get_yticklabels(), runs):
        tick.set_color(color(r) if r.get("placement") != "uniform" else "black")
    ax.invert_yaxis()  # first run on top
    ax.set_xlabel("median seconds per step on the critical rank (s)")
    ax.set_title("Step time by phase (run labels coloured by placement; black = uniform baseline)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="phase")
    return fig


def fig_predicted(runs):
    """Predicted (sweep --profile) against measured step time, one dot per run; None without predictions."""
    have = [r for r in runs if not math.isnan(num(r.get("predicted_step_seconds")))]
    if not have:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 6))
    measured = [1e3 * num(r.get("step_seconds_median")) for r in have]
    predicted = [1e3 * num(r.get("predicted_step_seconds")) for r in have]
    for r, x, y in zip(have, measured, predicted):
        ax.scatter(x, y, color=color(r), edgecolor="black", linewidth=0.5, zorder=3)
        ax.annotate(str(r.get("run_id")), (x, y), xytext=(4, 2), textcoords="offset points", fontsize=7)
    top = 1.1 * max(measured + predicted)
    ax.plot([0, top], [0, top], color="grey", linewidth=1, label="predicted = measured")
    ax.fill_between([0, top], [0, 0.95 * top], [0, 1.05 * top], color="grey", alpha=0.15, label="±5 %")
    errors = sorted(abs(y / x - 1) for x, y in zip(measured, predicted))
    median = errors[len(errors) // 2] if len(errors) % 2 else (errors[len(errors) // 2 - 1] + errors[len(errors) // 2]) / 2
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured step time (ms, median)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(f"Step-time model vs measurement: median |error| {100 * median:.1f}%, largest {100 * errors[-1]:.1f}%")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def fmt(value, spec, none="—"):
    """Format a number; a trailing "×" in spec is appended literally."""
    suffix = "×" if spec.endswith("×") else ""
    if value is None or math.isnan(num(value)):
        return none
    return format(num(value), spec.rstrip("×")) + suffix


def summary_markdown(runs, by_id):
    header = ["label", "placement", "world", "TFLOPS/GPU", "speedup", "tokens/s",
              "speedup_tokens", "loss max rel diff", "held-out max rel diff", "parity ok"]
    rows = []
    for r in runs:
        point = is_point(r)
        rows.append([str(r.get("label") or r.get("run_id") or "?").replace("|", "\\|"),
                     str(r.get("placement") or "?"), fmt(r.get("world_size"), ".0f"),
                     fmt(r.get("tflops_per_gpu"), ".4g"),
                     fmt(speedup(r, by_id, "tflops_per_gpu"), ".2f×") if point else "baseline",
                     fmt(r.get("tokens_per_second"), ",.0f"),
                     fmt(speedup(r, by_id, "tokens_per_second"), ".2f×") if point else "baseline",
                     fmt(r.get("loss_max_rel_diff"), ".1e"),
                     fmt(r.get("eval_loss_max_rel_diff"), ".1e"),
                     {True: "yes", False: "**no**"}.get(r.get("loss_parity_ok"), "—")])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def save(fig, out_dir, name):
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else None)
        print(path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path, help="directory holding results.jsonl")
    parser.add_argument("--out", type=Path, help="output directory (default RESULTS_DIR/plots)")
    args = parser.parse_args(argv)
    runs, not_ok, unparsable = load_runs(args.results_dir)
    measured = len(runs)
    runs = pool_repeats(runs)
    out_dir = args.out or args.results_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{len(runs)} ok runs" + (f" ({measured} with repeats, figures are their medians)"
                                     if measured > len(runs) else "")
          + f"; skipped {not_ok} with status != ok"
          + (f" and {unparsable} unparsable lines" if unparsable else ""))
    by_id = {r.get("run_id"): r for r in runs}
    save(fig_tflops(runs, by_id), out_dir, "tflops_per_gpu")
    save(fig_speedup(runs, by_id), out_dir, "speedup_vs_encoder")
    save(fig_loss_curves(runs, by_id, args.results_dir), out_dir, "loss_curves")
    save(fig_phases(runs), out_dir, "phase_breakdown")
    predicted = fig_predicted(runs)
    if predicted is not None:
        save(predicted, out_dir, "predicted_vs_measured")
    table = summary_markdown(runs, by_id)
    (out_dir / "summary.md").write_text(table)
    print(out_dir / "summary.md")
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
