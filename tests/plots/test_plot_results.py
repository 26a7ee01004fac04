"""plots/plot_results.py on a crafted sweep: every figure is written as PNG and SVG,
summary.md has one row per ok run, failed records are skipped, a point whose loss
curve equals its baseline exactly does not break the log-scale panel, and a missing
or useless results.jsonl fails with exit code 2 naming the file."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("HETPAR_SOURCE_DIR") or Path(__file__).parents[2])
SCRIPT = SOURCE / "plots" / "plot_results.py"
FIGURES = ["tflops_per_gpu", "speedup_vs_encoder", "loss_curves", "phase_breakdown"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ENCODERS = {"enc-64x2": 262144, "enc-256x4": 3145728}  # spans > 10x: log x axis
BASE_LOSSES = [6.2, 5.9, 5.5, 5.2, 5.0]


def record(run_id, role, encoder, placement, tflops, baseline=None, **extra):
    point = role == "point"
    layout_enc = {"uniform": "tp2.cp1.pp1.dp1", "colocated": "tp1.cp1.pp1.dp2",
                  "non-colocated": "tp1.cp1.pp1.dp1"}[placement]
    rec = {
        "run_id": run_id, "role": role, "baseline_id": baseline["run_id"] if point else None,
        "status": "ok", "error": None, "axes": {"encoder": encoder, "placement": placement},
        "label": f"{encoder} {placement} enc {layout_enc} / llm tp2.cp1.pp1.dp1",
        "placement": placement, "layout_encoder": layout_enc, "layout_llm": "tp2.cp1.pp1.dp1",
        "encoder_name": encoder, "encoder_params": ENCODERS[encoder], "encoder_flops_share": 0.3,
        "world_size": 2, "flops_per_step": 1.2e11, "step_seconds_median": 2.0 / tflops * 0.03,
        "step_seconds_p10": 1.9, "step_seconds_p90": 2.1, "tflops_per_gpu": tflops, "mfu": 0.2,
        "tokens_per_second": 4100.0 * tflops / 0.03, "image_tokens_per_second": 900.0,
        "samples_per_second": 16.0, "peak_memory_mib": 512.0,
        "phases": {"encoder_forward": 0.2, "encoder_backward": 0.4, "llm_forward": 0.5,
                   "llm_backward": 0.8, "grad_sync": 0.05, "optimizer": 0.02, "wait": 0.1},
        "speedup_tflops": round(tflops / baseline["tflops_per_gpu"], 3) if point else None,
        "speedup_tokens": round(tflops / baseline["tflops_per_gpu"], 3) if point else None,
        "loss_max_rel_diff": 1.2e-7 if point else None, "loss_parity_ok": True if point else None,
        "run_dir": f"runs/{run_id}", "commit": "abc123", "torch_version": "2.x", "device": "cpu",
    }
    rec.update(extra)
    return rec


def write_steps(root, rec, losses):
    run_dir = root / rec["run_dir"]
    run_dir.mkdir(parents=True)
    (run_dir / "steps.jsonl").write_text(
        "".join(json.dumps({"step": i + 1, "loss": loss, "lr": 1e-3}) + "\n" for i, loss in enumerate(losses)))


@pytest.fixture
def results_dir(tmp_path):
    """2 encoders x 3 placements with shared baselines, a second colocated layout,
    one failed record; the small encoder's colocated point matches its baseline exactly."""
    root = tmp_path / "results"
    records = []
    for i, encoder in enumerate(ENCODERS):
        base = record(f"b00{i + 1}", "baseline", encoder, "uniform", 0.030 + 0.01 * i)
        co = record(f"p00{2 * i + 1}", "point", encoder, "colocated", 0.036 + 0.01 * i, base,
                    loss_max_rel_diff=0.0 if i == 0 else 1.2e-7)
        non = record(f"p00{2 * i + 2}", "point", encoder, "non-colocated", 0.033 + 0.012 * i, base)
        records += [co, non, base]
        write_steps(root, base, BASE_LOSSES)
        write_steps(root, co, BASE_LOSSES if i == 0 else [x * (1 + 1e-7 * k) for k, x in enumerate(BASE_LOSSES)])
        write_steps(root, non, [x * (1 + 3e-7) for x in BASE_LOSSES])
    extra = record("p005", "point", "enc-256x4", "colocated", 0.05, records[-1],
                   layout_encoder="tp1.cp1.pp1.dp1", phases={"llm_forward": 0.5, "wait": 0.3},
                   label="enc-256x4 colocated enc tp1.cp1.pp1.dp1 / llm tp2.cp1.pp1.dp1")
    write_steps(root, extra, [x * (1 - 2e-7) for x in BASE_LOSSES])
    failed = record("p006", "point", "enc-256x4", "non-colocated", 0.05, records[-1],
                    status="failed", error="rank 1 exited with code 1", tflops_per_gpu=None)
    records += [extra, failed]
    root.mkdir(exist_ok=True)
    (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def load_script():
    spec = importlib.util.spec_from_file_location("plot_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plot(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def table_rows(summary):
    lines = [line for line in summary.splitlines() if line.startswith("|")]
    return lines[2:]  # header and separator


def test_writes_every_figure_and_the_summary(results_dir):
    done = plot(results_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    out = results_dir / "plots"
    for name in FIGURES:
        png, svg = out / f"{name}.png", out / f"{name}.svg"
        assert png.read_bytes().startswith(PNG_SIGNATURE), png
        assert b"<svg" in svg.read_bytes(), svg
        assert str(png) in done.stdout and str(svg) in done.stdout
    assert "skipped 1" in done.stdout
    summary = (out / "summary.md").read_text()
    rows = table_rows(summary)
    assert len(rows) == 7  # 2 baselines + 5 ok points; the failed one is left out
    assert not any("p006" in row or "rank 1 exited" in row for row in rows)
    assert "1.20×" in summary  # p001: 0.036 / 0.030
    assert summary in done.stdout


def test_held_out_losses_are_drawn_and_tabled(results_dir):
    runs = [json.loads(line) for line in (results_dir / "results.jsonl").read_text().splitlines()]
    for run in runs:
        if run["run_id"] in ("b001", "p001"):
            path = results_dir / run["run_dir"] / "steps.jsonl"
            lines = [json.loads(line) for line in path.read_text().splitlines()]
            lines[-1]["eval_loss"] = 5.25 if run["run_id"] == "b001" else 5.25 * (1 + 4e-8)
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        if run["run_id"] == "p001":
            run["eval_loss_max_rel_diff"] = 4e-8
    (results_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    module = load_script()
    assert module.read_losses(results_dir, runs[2], "eval_loss") == {5: 5.25}  # b001: step 5 only
    assert module.read_losses(results_dir, runs[1], "eval_loss") == {}  # p002 never evaluated
    done = plot(results_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    svg = (results_dir / "plots" / "loss_curves.svg").read_text()
    assert "baseline held-out" in svg and "point held-out" in svg
    assert "held-out 4.0e-08" in svg
    summary = (results_dir / "plots" / "summary.md").read_text()
    assert "held-out max rel diff" in summary and "4.0e-08" in summary


def test_exact_match_is_reported_not_plotted_on_log_scale(results_dir):
    done = plot(results_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "identical to baseline" in (results_dir / "plots" / "loss_curves.svg").read_text()


def test_out_option_and_missing_steps(results_dir, tmp_path):
    # A point whose run directory is gone still plots, with a note instead of a curve.
    (results_dir / "runs" / "p002" / "steps.jsonl").unlink()
    done = plot(results_dir, "--out", tmp_path / "elsewhere")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in FIGURES:
        assert (tmp_path / "elsewhere" / f"{name}.png").stat().st_size > 0
    assert "no point steps to compare" in (tmp_path / "elsewhere" / "loss_curves.svg").read_text()
    assert not (results_dir / "plots").exists()


def test_missing_results_file_exits_2(tmp_path):
    done = plot(tmp_path)
    assert done.returncode == 2
    assert str(tmp_path / "results.jsonl") in done.stderr


def test_no_usable_records_exits_2(tmp_path):
    (tmp_path / "results.jsonl").write_text(
        json.dumps({"run_id": "p001", "status": "failed", "error": "boom"}) + "\nnot json\n")
    done = plot(tmp_path)
    assert done.returncode == 2
    assert "results.jsonl" in done.stderr and "no usable records" in done.stderr


def test_sparse_records_still_plot(tmp_path):
    """Records with most fields missing (and a single encoder, baselines only for one)
    give figures with gaps, not a crash."""
    records = [{"run_id": "b001", "role": "baseline", "status": "ok", "placement": "uniform"},
               {"run_id": "p001", "role": "point", "status": "ok", "baseline_id": "b001",
                "placement": "colocated", "tflops_per_gpu": 0.02, "phases": {"wait": 0.1}},
               {"run_id": "b002", "role": "baseline", "status": "ok", "encoder_name": "enc-x",
                "encoder_params": 10, "tflops_per_gpu": 0.01, "speedup_tflops": None}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = plot(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(table_rows((tmp_path / "plots" / "summary.md").read_text())) == 3
    for name in FIGURES:
        assert (tmp_path / "plots" / f"{name}.png").read_bytes().startswith(PNG_SIGNATURE)


def test_repeats_are_pooled_to_one_bar_at_their_median(results_dir):
    """`sweep --repeat 3` records (b001r2, p001r3 ...) become one row per run with the
    median of the repeats' figures, its speed-up against the pooled baseline."""
    path = results_dir / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    by_id = {r["run_id"]: r for r in records}
    extra = []
    for k, (base_tflops, point_tflops) in ((2, (0.028, 0.050)), (3, (0.034, 0.040))):
        base = dict(by_id["b001"], run_id=f"b001r{k}", repeat=k, tflops_per_gpu=base_tflops)
        point = dict(by_id["p001"], run_id=f"p001r{k}", repeat=k, baseline_id=f"b001r{k}",
                     tflops_per_gpu=point_tflops, speedup_tflops=round(point_tflops / base_tflops, 3))
        extra += [base, point]
    path.write_text(path.read_text() + "".join(json.dumps(r) + "\n" for r in extra))
    done = plot(results_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "11 with repeats" in done.stdout
    rows = table_rows((results_dir / "plots" / "summary.md").read_text())
    assert len(rows) == 7  # still one row per run
    # p001: tflops 0.036, 0.050, 0.040 -> 0.040 over b001's 0.030, 0.028, 0.034 -> 0.030:
    # 1.33x, as report.md pools it (the rounds' own speed-ups 1.20, 1.786, 1.176 are its range)
    p001 = [row for row in rows if by_id["p001"]["label"] in row]
    assert len(p001) == 1 and "1.33×" in p001[0] and "0.04" in p001[0], p001
    # The rounds' range of each speed-up goes with the pooled point (the speed-up figure's bars).
    pooled = {r["run_id"]: r for r in load_script().pool_repeats(records + extra)}
    assert pooled["p001"]["speedup_tflops_range"] == (1.176, 1.786)
    assert "speedup_tflops_range" not in pooled["p002"]  # one run: no range


def test_predictions_get_their_own_figure_only_when_there_are_some(results_dir):
    done = plot(results_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (results_dir / "plots" / "predicted_vs_measured.png").exists()  # no sweep --profile
    lines = (results_dir / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r in records:
        if r["status"] == "ok":
            r["predicted_step_seconds"] = 1.08 * r["step_seconds_median"]
    (results_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = plot(results_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    png = results_dir / "plots" / "predicted_vs_measured.png"
    assert png.read_bytes().startswith(PNG_SIGNATURE), png
    assert str(png) in done.stdout


def test_layout_labels_keep_the_dimensions_above_one_and_sequence_parallelism():
    plot_results = load_script()
    assert plot_results.compact("tp1.cp1.pp1.dp2") == "dp2"
    assert plot_results.compact("tp2.cp1.pp1.dp1.sp") == "tp2.sp"
    assert plot_results.compact("tp1.cp1.pp1.dp1") == "1 rank"
    assert plot_results.compact(None) == "?"
