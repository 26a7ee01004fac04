"""The scripts that write results (gpu-check.sh, paper.sh, the peer benchmark) never write over a
user's files: a non-empty folder they did not make is refused at once, exit 2,
its files untouched; their own earlier folder is taken again."""
import os
import subprocess
import sys
from pathlib import Path

SOURCE = Path(os.environ.get("HETPAR_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def users_folder(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "stages.tsv").write_text("my own table\n")
    (folder / "paper_speedups.md").write_text("my own notes\n")
    return folder


def earlier_output(tmp_path, marker, name):
    """A folder the script made before: its marker and one of its files."""
    own = tmp_path / "own"
    own.mkdir()
    (own / marker).write_text("")
    (own / name).write_text("an earlier run's\n")
    return own


def untouched(folder):
    return (sorted(p.name for p in folder.iterdir()) == ["paper_speedups.md", "stages.tsv"]
            and (folder / "stages.tsv").read_text() == "my own table\n"
            and (folder / "paper_speedups.md").read_text() == "my own notes\n")


def test_gpu_check_refuses_a_users_folder(tmp_path):
    folder = users_folder(tmp_path)
    done = subprocess.run([str(SOURCE / "scripts" / "gpu-check.sh"), "--out", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "not made by gpu-check" in done.stderr
    assert untouched(folder)


def test_paper_refuses_a_users_folder_and_takes_its_own(tmp_path):
    folder = users_folder(tmp_path)
    # The folder is checked before anything runs: the binary and python are never called.
    done = subprocess.run(["bash", str(SOURCE / "scripts" / "paper.sh"), "/nonexistent/hetpar", "/nonexistent/python",
                           str(folder)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "not made by scripts/paper.sh" in done.stderr
    assert untouched(folder)
    own = earlier_output(tmp_path, ".hetpar-paper", "paper_speedups.md")
    done = subprocess.run(["bash", str(SOURCE / "scripts" / "paper.sh"), "/nonexistent/hetpar", "/nonexistent/python",
                           str(own)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "not made by" not in done.stderr  # taken: it fails later, at the missing binary
    assert (own / "plans").is_dir()


def test_peer_bench_refuses_a_users_folder_and_takes_its_own(tmp_path):
    folder = users_folder(tmp_path)
    script = SOURCE / "bench" / "peer" / "peer_bench.py"
    # The folder is checked first: the binary is never looked for.
    done = subprocess.run([sys.executable, str(script), "--smoke", "--hetpar", "/nonexistent/hetpar",
                           "--out", str(folder)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "holds files this benchmark did not write (first: paper_speedups.md)" in done.stderr
    assert untouched(folder)
    own = earlier_output(tmp_path, ".hetpar-peer-bench", "peer_bench.json")
    done = subprocess.run([sys.executable, str(script), "--smoke", "--hetpar", "/nonexistent/hetpar",
                           "--out", str(own)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    # Taken: it fails later, at the missing binary.
    assert done.returncode == 1 and "no hetpar binary at /nonexistent/hetpar" in done.stderr, done.stderr
