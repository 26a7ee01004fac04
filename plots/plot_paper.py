#!/usr/bin/env python3
"""Predicted paper figures from the planner's JSON outputs (`hetpar plan ... --out DIR` writes DIR/plan.json).

Usage: plot_paper.py OUT_DIR PLAN_JSON...   writes OUT_DIR/paper_speedups.png (a panel per LLM and
device count: predicted speedup over the best uniform layout against encoder size) and .csv (a row
per plan), prints a markdown table; exits 2 naming the file on a missing or invalid plan."""
import argparse
import csv
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

plt.rcParams.update({"font.size": 9})

FORMAT = "hetpar-plan/1"
PLACEMENTS = ["uniform", "colocated", "non-colocated"]
# Same colours as plot_results.py; line style = placement, marker = metric.
COLORS = {"uniform": "#8c8c8c", "colocated": "#1f77b4", "non-colocated": "#ff7f0e"}
CROSS_COLOR = "#2ca02c"
STYLES = {"colocated": "-", "non-colocated": "--"}
METRICS = {"tflops": ("speedup_tflops", "o", "TFLOPS/GPU"), "tokens": ("speedup_tokens", "^", "tokens/s")}
# The paper's best-case headline results (percent); it does not say at which encoder each was reached.
PAPER = [("colocated", 49.3, "TFLOPS/GPU"), ("non-colocated", 13.0, "tokens/s"), ("non-colocated", 9.6, "TFLOPS/GPU")]
ENTRY_NUMBERS = ["step_seconds", "tokens_per_second", "tflops_per_device"]
DIMS = ("tp", "cp", "pp", "dp")


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def load_plan(path):
    """The parsed plan, or exit naming the file and the first problem found."""
    def bad(message):
        fail(f"{path}: {message}")

    def need(obj, key, where, check, what):
        if key not in obj:
            bad(f'missing key "{where}{key}"')
        if not check(obj[key]):
            bad(f'"{where}{key}" must be {what}, got {json.dumps(obj[key])[:60]}')
        return obj[key]

    try:
        plan = json.loads(Path(path).read_text())
    except OSError as e:
        bad(f"cannot read it ({e.strerror})")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        bad(f"not valid JSON ({e})")
    if not isinstance(plan, dict):
        bad("not a JSON object")
    if plan.get("format") != FORMAT:
        bad(f'"format" is {json.dumps(plan.get("format"))}, expected "{FORMAT}"')
    for key in ("llm", "encoder"):
        need(plan, key, "", lambda v: isinstance(v, str) and v, "a non-empty string")
    need(plan, "encoder_parameters", "", lambda v: is_number(v) and v > 0, "a positive number")
    need(plan, "devices", "", is_count, "a positive integer")
    best = need(plan, "best", "", lambda v: isinstance(v, dict), "an object")
    for placement in PLACEMENTS:
        entry = need(best, placement, "best.", lambda v: v is None or isinstance(v, dict), "an object or null")
        where = f"best.{placement}."
        for key in ENTRY_NUMBERS if entry else []:
            need(entry, key, where, is_number, "a number")
        for key, _, _ in METRICS.values() if entry else []:
            need(entry, key, where, lambda v: v is None or is_number(v), "a number or null")
        for side in ("encoder", "llm") if entry else []:
            layout = need(entry, side, where, lambda v: isinstance(v, dict), "an object")
            for dim in DIMS:
                need(layout, dim, f"{where}{side}.", is_count, "a positive integer")
    return plan


def pct(entry, key):
    """Speedup over the best uniform layout in percent; nan when the entry or the value is null."""
    value = (entry or {}).get(key)
    return math.nan if value is None else 100.0 * (value - 1.0)


def objective(plan):
    return "tflops" if "tflop" in str(plan.get("objective", "")).lower() else "tokens"


def regime(plan):
    """The placement whose best layout scores highest on the plan's objective (ties: the simpler one)."""
    key = "tflops_per_device" if objective(plan) == "tflops" else "tokens_per_second"
    return max([(plan["best"][p][key], -i, p) for i, p in enumerate(PLACEMENTS) if plan["best"][p]],
               default=(0, 0, "none fits"))[2]


def human(count):
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= div:
            return f"{count / div:.3g}{suffix}"
    return f"{count:.0f}"


def crossover(plans):
    """(x, left, right) where non-colocated's speedup first exceeds colocated's on the plan's
    objective (a placement that does not fit counts as -inf); None when not in range."""
    points = []
    for plan in plans:
        co, nc = (pct(plan["best"][p], METRICS[objective(plan)][0]) for p in STYLES)
        if not (math.isnan(co) and math.isnan(nc)):
            points.append((plan["encoder_parameters"], (-math.inf if math.isnan(nc) else nc)
                           - (-math.inf if math.isnan(co) else co)))
    for (x0, d0), (x1, d1) in zip(points, points[1:]):
        if d0 <= 0 < d1:
            t = -d0 / (d1 - d0) if math.isfinite(d0) and math.isfinite(d1) else 0.5  # in log x
            return math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))), x0, x1
    return None


def draw_panel(ax, plans):
    xs = [p["encoder_parameters"] for p in plans]
    data = []
    for placement, style in STYLES.items():
        for key, marker, _ in METRICS.values():
            ys = [pct(p["best"][placement], key) for p in plans]
            data += [y for y in ys if not math.isnan(y)]
            ax.plot(xs, ys, ls=style, marker=marker, color=COLORS[placement], ms=5, lw=1.4, zorder=3)
    ax.axhline(0, color=COLORS["uniform"], lw=1)
    for placement, level, metric in PAPER:  # labels sit under the data, never hiding a point
        ax.axhline(level, ls=":", lw=1.1, color=COLORS[placement], zorder=1)
        ax.text(0.99, level, f"paper: {placement} +{level}% {metric}", transform=ax.get_yaxis_transform(),
                ha="right", va="top" if level < 10 else "bottom", fontsize=6.5, color=COLORS[placement],
                zorder=1.5, bbox=dict(fc="white", ec="none", alpha=0.6, pad=0.3))
    cross, metric = crossover(plans), METRICS[objective(plans[0])][2]
    if cross:
        ax.axvspan(cross[1], cross[2], color=CROSS_COLOR, alpha=0.12, zorder=0)
        ax.axvline(cross[0], color=CROSS_COLOR, lw=1, zorder=1)
    note = f"predicted crossover ≈ {human(cross[0])} params" if cross else "no crossover in range"
    ax.text(0.02, 0.03, f"{note} (on {metric})", transform=ax.transAxes, fontsize=7.5,
            color=CROSS_COLOR if cross else "black")
    if not data:
        ax.text(0.5, 0.6, "no colocated or non-colocated layout fits", transform=ax.transAxes, ha="center")
    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(xs, [f"{p['encoder']} ({human(p['encoder_parameters'])})" for p in plans], fontsize=7,
                  rotation=30, ha="right", rotation_mode="anchor")
    pad = 10 ** (0.12 * math.log10(max(xs) / min(xs)) + 0.3)  # also gives one point some room
    ax.set_xlim(min(xs) / pad, max(xs) * pad)
    levels = data + [0.0] + [level for _, level, _ in PAPER]
    ax.set_ylim(min(levels) - 6, max(levels) + 8)
    ax.grid(alpha=0.3)
    ax.set_xlabel("encoder parameters (log)")
    ax.set_title(f"{plans[0]['llm']} on {plans[0]['devices']} GPUs", fontsize=10)


def draw_figure(groups, path):
    cols, rows = min(3, len(groups)), math.ceil(len(groups) / 3)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, plans in zip(axes.flat, groups.values()):
        draw_panel(ax, plans)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("predicted speedup over\nbest uniform layout (%)")
    handles = [Line2D([], [], color=COLORS[p], ls=s, label=p) for p, s in STYLES.items()]
    handles += [Line2D([], [], color="black", marker=m, ls="none", label=f"{name} speedup")
                for _, m, name in METRICS.values()]
    handles += [Line2D([], [], color="black", ls=":", label="paper, best case (reference level)"),
                Patch(color=CROSS_COLOR, alpha=0.3, label="predicted crossover (non-colocated overtakes)")]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=3, fontsize=8)
    fig.suptitle("Predicted speedup of heterogeneous layouts over the best uniform layout")
    fig.tight_layout()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def csv_row(plan, path):
    row = {k: plan[k] for k in ("llm", "encoder", "encoder_parameters", "devices")}
    for placement in PLACEMENTS:
        entry, prefix = plan["best"][placement] or {}, placement.replace("-", "_") + "_"
        row[prefix + "layout"] = " / ".join(f"{short} " + ".".join(f"{d}{entry[side][d]}" for d in DIMS)
                                            for side, short in (("encoder", "enc"), ("llm", "llm"))) if entry else ""
        if entry.get("recompute"):
            layers = entry.get("recompute_layers") or 0  # 0: every layer
            modules = entry.get("recompute_modules") or "both"
            which = "" if modules == "both" else f" {modules}"
            row[prefix + "layout"] += f" +recompute{which} {layers}/stage" if layers else f" +recompute{which}"
        if placement == "non-colocated":
            row[prefix + "run_ahead"] = entry.get("run_ahead", "")
        for key in ENTRY_NUMBERS + ["speedup_tokens", "speedup_tflops"]:
            row[prefix + key] = "" if entry.get(key) is None else entry[key]
    return dict(row, regime=regime(plan), file=str(path))


def markdown(plans):
    def cell(entry, *keys):
        return "no fit" if entry is None else " / ".join(
            "—" if math.isnan(pct(entry, k)) else f"{pct(entry, k):+.1f}%" for k in keys)
    def centric(p):
        """The best heterogeneous layout over the LLM-centric uniform one (absent in older plans)."""
        best = [p["best"][k] for k in ("colocated", "non-colocated") if p["best"][k]]
        values = [e.get("speedup_over_llm_centric") for e in best if e.get("speedup_over_llm_centric") is not None]
        return f"{100.0 * (max(values) - 1.0):+.1f}%" if values else "—"
    lines = ["| llm | encoder | devices | colocated (TFLOPS) | non-colocated (tokens / TFLOPS) | "
             "best over LLM-centric | regime |",
             "|---|---|---:|---:|---:|---:|---|"]
    lines += [f"| {p['llm']} | {p['encoder']} | {p['devices']} | {cell(p['best']['colocated'], 'speedup_tflops')} | "
              f"{cell(p['best']['non-colocated'], 'speedup_tokens', 'speedup_tflops')} | {centric(p)} | {regime(p)} |"
              for p in plans]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("plans", nargs="+", type=Path, metavar="PLAN_JSON")
    args = parser.parse_args(argv)
    loaded = [(load_plan(path), path) for path in args.plans]
    loaded.sort(key=lambda pp: (pp[0].get("llm_parameters") if is_number(pp[0].get("llm_parameters")) else math.inf,
                                pp[0]["llm"], pp[0]["devices"], pp[0]["encoder_parameters"], pp[0]["encoder"]))
    seen, groups = {}, {}
    for plan, path in loaded:
        case = (plan["llm"], plan["devices"], plan["encoder"])
        if case in seen:
            fail(f"{path}: plans the same case as {seen[case]} ({plan['llm']} + {plan['encoder']} "
                 f"on {plan['devices']} devices); pass one plan per case")
        seen[case] = path
        groups.setdefault((plan["llm"], plan["devices"]), []).append(plan)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    draw_figure(groups, args.out_dir / "paper_speedups.png")
    rows = [csv_row(plan, path) for plan, path in loaded]
    with open(args.out_dir / "paper_speedups.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(markdown([plan for plan, _ in loaded]))
    print(f"wrote {args.out_dir / 'paper_speedups.png'} and {args.out_dir / 'paper_speedups.csv'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
