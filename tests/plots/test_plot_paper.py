"""plots/plot_paper.py on real planner output: hetpar plan for two encoder sizes
on the H100 profile, then the figure, the CSV (a row per plan) and the markdown
table; a file that is not a plan fails with exit code 2 naming it; the table
marks a layout that recomputes, how many layers a stage where not all, and in which module where
not both."""
import csv
import os
import subprocess
import sys
from pathlib import Path

SOURCE = Path(os.environ.get("HETPAR_SOURCE_DIR") or Path(__file__).parents[2])
HETPAR = os.environ.get("HETPAR_BINARY", str(SOURCE / "build" / "hetpar"))
SCRIPT = SOURCE / "plots" / "plot_paper.py"
ENCODERS = {"enc-small": ["encoder.hidden=64"], "enc-large": ["encoder.hidden=256", "encoder.layers=4"]}


def plan(tmp_path, name, sets):
    out = tmp_path / name
    command = [HETPAR, "plan", str(SOURCE / "workloads" / "tiny.toml"), "--devices", "8",
               "--profile", str(SOURCE / "profiles" / "h100_dgx.json"), "--top", "2",
               "--label", "llm=tiny", "--label", f"encoder={name}", "--out", str(out)]
    for s in sets:
        command += ["--set", s]
    subprocess.run(command, check=True, capture_output=True)
    return out / "plan.json"


def test_plots_real_plans(tmp_path):
    plans = [plan(tmp_path, name, sets) for name, sets in ENCODERS.items()]
    figures = tmp_path / "figures"
    done = subprocess.run([sys.executable, str(SCRIPT), str(figures), *map(str, plans)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (figures / "paper_speedups.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with open(figures / "paper_speedups.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["encoder"] for r in rows) == sorted(ENCODERS)
    assert all(r["devices"] == "8" for r in rows)
    assert "enc-large" in done.stdout and "enc-small" in done.stdout


def test_a_file_that_is_not_a_plan_fails_naming_it(tmp_path):
    bad = tmp_path / "not_a_plan.json"
    bad.write_text('{"format": "something-else"}')
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "figures"), str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "not_a_plan.json" in done.stderr
    assert not (tmp_path / "figures").exists()


def test_the_table_marks_recompute_and_how_many_layers(tmp_path):
    plans = [plan(tmp_path, "every-layer", ["run.recompute=full"]),
             plan(tmp_path, "first-layer", ["run.recompute=full", "run.recompute_layers=1"]),
             plan(tmp_path, "llm-first-layer", ["run.recompute=full", "run.recompute_layers=1",
                                                "run.recompute_modules=llm"])]
    figures = tmp_path / "figures"
    done = subprocess.run([sys.executable, str(SCRIPT), str(figures), *map(str, plans)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(figures / "paper_speedups.csv") as f:
        layouts = {r["encoder"]: r["uniform_layout"] for r in csv.DictReader(f)}
    assert layouts["every-layer"].endswith(" +recompute"), layouts
    assert layouts["first-layer"].endswith(" +recompute 1/stage"), layouts
    assert layouts["llm-first-layer"].endswith(" +recompute llm 1/stage"), layouts
