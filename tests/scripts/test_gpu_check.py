"""scripts/gpu-check.sh without a GPU, and its report on crafted results."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("HETPAR_SOURCE_DIR", Path(__file__).resolve().parents[2]))
REPORT = SOURCE / "scripts" / "gpu_check_report.py"


def gpu_visible():
    return any(Path("/dev").glob("nvidia[0-9]*"))


@pytest.mark.skipif(gpu_visible(), reason="a GPU is visible: the check would run for real")
def test_without_a_gpu_it_exits_3_at_once(tmp_path):
    start = time.monotonic()
    done = subprocess.run([str(SOURCE / "scripts" / "gpu-check.sh"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "no CUDA device visible" in done.stderr
    assert time.monotonic() - start < 10
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_rehearsal_without_binaries_says_so_and_writes_nothing(tmp_path):
    done = subprocess.run([str(SOURCE / "scripts" / "gpu-check.sh"), "--rehearse", "--build", str(tmp_path / "none"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--rehearse takes hetpar and test_gpu from --build" in done.stderr
    assert not (tmp_path / "out").exists()


def steps(losses, phases=None, seconds=1.0):
    return "".join(json.dumps({"step": i + 1, "loss": l, "step_seconds": seconds,
                               "phases": phases or {"llm_forward": 0.3, "llm_backward": 0.6}}) + "\n"
                   for i, l in enumerate(losses))


def crafted(out, bf16_shift, mfu, recompute_shift=0.0):
    out.mkdir()
    (out / "stages.tsv").write_text("build\t0\t100\ndevices\t0\t1\nhost_sync\t0\t5\n"
                                    "multi_gpu\tskipped\t0\tone GPU\n")
    (out / "devices.json").write_text(json.dumps({"cuda_devices": 1, "torch_version": "2.11.0", "devices": [
        {"device": "NVIDIA H200", "cuda_driver": "13.0", "cuda_runtime": "13.0", "nccl_version": "2.28.9"}]}))
    (out / "gpu_tests.json").write_text(json.dumps({"testsuites": [{"testsuite": [
        {"name": "NcclCommunicatorOfOneRank", "result": "COMPLETED"}]}]}))
    base = [5.0, 4.0, 3.0]
    for run, losses in {"fp32_cpu": base, "fp32_cuda": [l * (1 + 1e-7) for l in base],
                        "fp32_cuda_recompute": [l * (1 + 1e-7 + recompute_shift) for l in base],
                        "bf16_cuda": [l * (1 + bf16_shift) for l in base],
                        "bf16_residual_cuda": [l * (1 + 1.5 * bf16_shift) for l in base]}.items():
        (out / run).mkdir()
        (out / run / "steps.jsonl").write_text(steps(losses))
    for run, run_mfu in (("throughput", mfu), ("throughput_bf16_residual", mfu * 1.02)):
        (out / run).mkdir()
        (out / run / "steps.jsonl").write_text(steps([9.0, 8.0, 7.0]))
        (out / run / "summary.json").write_text(json.dumps({
            "warmup_steps": 1, "mfu": run_mfu, "tflops_per_gpu": run_mfu * 989, "step_seconds_median": 1.0,
            "peak_source": "x", "peak_memory_mib": 1024.0, "peak_tensor_mib": 1024.0, "gemm_adds_into_fp32": True}))


def report(out):
    done = subprocess.run([sys.executable, str(REPORT), str(out)], capture_output=True, text=True)
    return done.returncode, done.stdout, json.loads((out / "gpu-check.json").read_text())


def test_report_passes_a_good_run(tmp_path):
    crafted(tmp_path / "out", bf16_shift=1e-4, mfu=0.5)
    code, text, result = report(tmp_path / "out")
    assert code == 0, text
    by_name = {c["check"]: c for c in result["checks"]}
    assert by_name["fp32 cuda vs cpu"]["result"] == "pass"
    assert by_name["bf16 vs fp32 on cuda"]["result"] == "pass"
    assert by_name["recompute vs keeping activations, fp32 on cuda"]["result"] == "pass"
    assert by_name["bf16 with a bf16 residual stream vs fp32 on cuda"]["result"] == "pass"
    assert by_name["throughput, bf16 residual stream"]["result"] == "pass"
    assert by_name["throughput (8B-shaped layers, bf16): phase times vs step wall time"]["figure"].startswith(
        "phases sum to 90.0 %")
    assert by_name["multi-GPU NCCL parity"]["result"] == "not run"
    assert "one GPU" in by_name["multi-GPU NCCL parity"]["figure"]


def test_report_fails_a_recompute_run_that_drifts(tmp_path):
    crafted(tmp_path / "out", bf16_shift=1e-4, mfu=0.5, recompute_shift=1e-5)
    code, text, result = report(tmp_path / "out")
    assert code == 1, text
    by_name = {c["check"]: c for c in result["checks"]}
    assert by_name["recompute vs keeping activations, fp32 on cuda"]["result"] == "FAIL"


@pytest.mark.parametrize("bf16_shift, mfu, failing", [
    (0.0, 0.5, "bf16 vs fp32 on cuda"),      # bf16 equal to fp32: not in effect
    (0.0, 0.5, "bf16 with a bf16 residual stream vs fp32 on cuda"),
    (1e-2, 0.5, "bf16 vs fp32 on cuda"),     # past the bf16 tolerance
    (1e-4, 0.3, "throughput (8B-shaped layers, bf16)"),
])
def test_report_fails_what_misses(tmp_path, bf16_shift, mfu, failing):
    crafted(tmp_path / "out", bf16_shift, mfu)
    code, text, result = report(tmp_path / "out")
    assert code == 1
    assert {c["check"]: c for c in result["checks"]}[failing]["result"] == "FAIL", text


@pytest.mark.parametrize("sums_after_shift, started, sharded_shift, ok", [
    (0.0, 50, 0.0, True), (1e-9, 50, 0.0, False), (0.0, 0, 0.0, False),
    (0.0, 50, 1e-7, True), (0.0, 50, 1e-5, False)])
def test_report_checks_the_two_gpu_runs(tmp_path, sums_after_shift, started, sharded_shift, ok):
    out = tmp_path / "out"
    crafted(out, bf16_shift=1e-4, mfu=0.5)
    (out / "stages.tsv").write_text("build\t0\t100\ndevices\t0\t1\nhost_sync\t0\t5\n")  # multi_gpu ran
    base = [5.0, 4.0, 3.0]
    for run, losses in {"uniform_2": base, "uniform_2_sums_after": [l * (1 + sums_after_shift) for l in base],
                        "uniform_2_sharded": [l * (1 + sharded_shift) for l in base],
                        "colocated_2": base, "colocated_2_sp": base, "noncolocated_2": base}.items():
        (out / run).mkdir()
        (out / run / "steps.jsonl").write_text(steps(losses))
    (out / "uniform_2" / "summary.json").write_text(json.dumps({"grad_buckets": {"buckets": 51,
                                                                                 "started_in_backward": started}}))
    code, text, result = report(out)
    by_name = {c["check"]: c for c in result["checks"]}
    assert by_name["colocated 2 GPUs vs uniform 2"]["result"] == "pass"
    assert by_name["colocated, LLM sequence parallel, 2 GPUs vs uniform 2"]["result"] == "pass"
    same = by_name["DP sums in the backward vs after it, 2 GPUs"]["result"] == "pass"
    early = by_name["DP buckets started in the backward, 2 GPUs"]["result"] == "pass"
    sharded = by_name["optimizer state sharded vs whole, 2 GPUs"]["result"] == "pass"
    assert (same and early and sharded) == ok, text
    assert (code == 0) == ok, text


def plan(out, profile, step_seconds):
    (out / f"plan_{profile}").mkdir()
    (out / f"plan_{profile}" / "plan.json").write_text(json.dumps(
        {"format": "hetpar-plan/1", "profile": f"profiles/{profile}.json",
         "given": {"step_seconds": step_seconds, "peak_memory_bytes": 1.25 * 2**30,
                   "fullest_rank_bytes": {"reserved": 0.15 * 2**30}}}))


def test_report_sets_the_model_beside_the_measurement(tmp_path):
    out = tmp_path / "out"
    crafted(out, bf16_shift=1e-4, mfu=0.5)  # measured: 1.0 s/step
    plan(out, "published", 1.10)
    plan(out, "measured", 0.80)
    code, text, result = report(out)
    by_name = {c["check"]: c for c in result["checks"]}
    assert by_name["step-time model, published profile"]["result"] == "pass"
    assert by_name["step-time model, published profile"]["figure"].startswith("published.json: predicted 1.100")
    assert "(+10.0 %)" in by_name["step-time model, published profile"]["figure"]
    assert "weight gradients summed in fp32 by the GEMM" in by_name["throughput (8B-shaped layers, bf16)"]["figure"]
    # The tensor part (1.25 - 0.15 GiB) against the allocator's 1 GiB peak.
    assert "tensor memory 1.1 GiB (+10.0 %)" in by_name["step-time model, published profile"]["figure"]
    assert by_name["step-time model, measured profile"]["result"] == "FAIL"  # 20 % off
    assert "(-20.0 %)" in by_name["step-time model, measured profile"]["figure"]
    assert code == 1, text


# The step-time model is checked on the published profile of the chip found.
@pytest.mark.parametrize("device, profile", [("NVIDIA H100 80GB HBM3", "h100_dgx"), ("NVIDIA A100-SXM4-80GB", "a100_dgx"),
                                             ("NVIDIA H200", "h200_dgx"), ("cpu: AMD EPYC", "h200_dgx"), (None, "h200_dgx")])
def test_the_published_profile_is_the_chips(tmp_path, device, profile):
    devices = tmp_path / "devices.json"
    if device is not None:  # None: no devices.json (the devices stage failed)
        devices.write_text(json.dumps({"cuda_devices": 1, "devices": [{"device": device}]}))
    done = subprocess.run([sys.executable, str(REPORT), "--published-profile", str(devices)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"profiles/{profile}.json"
    assert (SOURCE / done.stdout.strip()).exists()


# The rehearsal runs every stage a CPU can, as the script writes it: a typo in
# a stage's settings or a report that misreads real output shows here, not in
# the few GPU minutes a check gets. About 25 s on the 2-core machine.
@pytest.mark.skipif("HETPAR_BINARY" not in os.environ, reason="needs the build's hetpar (HETPAR_BINARY)")
def test_rehearsal_runs_every_stage_a_cpu_can(tmp_path):
    build = Path(os.environ["HETPAR_BINARY"]).resolve().parent
    out = tmp_path / "out"
    done = subprocess.run([str(SOURCE / "scripts" / "gpu-check.sh"), "--rehearse", "--build", str(build),
                           "--python", sys.executable, "--out", str(out)],
                          capture_output=True, text=True, cwd=SOURCE, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("REHEARSAL on the CPU"), done.stdout
    stages = {line.split("\t")[0]: line.split("\t")[1] for line in (out / "stages.tsv").read_text().splitlines()}
    ran = ["devices", "gpu_tests", "fp32_cuda", "fp32_cpu", "fp32", "fp32_cuda_recompute", "recompute", "bf16_cuda",
           "bf16", "bf16_residual_cuda", "bf16_residual", "host_sync", "predict_published",
           "predict_published_bf16_residual", "uniform_2", "colocated_2", "colocated_parity",
           "colocated_2_sp", "colocated_sp_parity", "uniform_2_sums_after", "overlap_same_bits",
           "uniform_2_sharded", "sharded_parity", "noncolocated_2", "noncolocated_parity"]
    assert {name: stages.get(name) for name in ran} == {name: "0" for name in ran}, done.stderr
    assert {stages[n] for n in ("build", "rehearsal", "throughput", "throughput_bf16_residual", "calibrate")} == {"skipped"}
    result = json.loads((out / "gpu-check.json").read_text())
    assert result["rehearsal"] is True
    by_name = {c["check"]: c["result"] for c in result["checks"]}
    assert by_name["devices"] == by_name["gpu_tests"] == by_name["throughput (8B-shaped layers, bf16)"] == "not run"
    parities = [name for name in by_name if " vs " in name]
    assert len(parities) == 9 and all(by_name[name] == "pass" for name in parities), by_name
    assert json.loads((out / "plan_published" / "plan.json").read_text())["profile"] == "profiles/h200_dgx.json"
    # Every run was on the CPU.
    for run in ("fp32_cuda", "bf16_cuda", "colocated_2_sp"):
        assert json.loads((out / run / "summary.json").read_text())["device"].startswith("cpu"), run
