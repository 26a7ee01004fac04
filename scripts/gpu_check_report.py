#!/usr/bin/env python3
"""The GPU check's report: reads what scripts/gpu-check.sh left in OUT and
writes OUT/gpu-check.json and a table. Standard library only (a GPU node's
python may have nothing else). Exit 0 when every check that ran passed."""
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path


def read_steps(run_dir):
    path = Path(run_dir) / "steps.jsonl"
    if not path.exists():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def max_relative_difference(a, b):
    """The largest |a - b| / |b| of the two loss curves, step by step."""
    if not a or not b or len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        if x["loss"] is None or y["loss"] is None:
            return math.inf
        worst = max(worst, abs(x["loss"] - y["loss"]) / abs(y["loss"]))
    return worst


def published_profile(devices_json):
    """The published profile of the chip `hetpar devices` found (the H200's where
    the name says neither H100 nor A100): memory-bound rates follow the chip's
    HBM, so another chip's would skew the prediction."""
    try:
        name = json.loads(Path(devices_json).read_text())["devices"][0]["device"]
    except (OSError, ValueError, KeyError, IndexError):
        name = ""
    for chip, profile in (("H100", "h100_dgx.json"), ("A100", "a100_dgx.json")):
        if chip in name:
            return "profiles/" + profile
    return "profiles/h200_dgx.json"


def main(out):
    out = Path(out)
    stages = {}
    for line in (out / "stages.tsv").read_text().splitlines() if (out / "stages.tsv").exists() else []:
        fields = line.split("\t")
        stages[fields[0]] = {"exit": fields[1], "seconds": int(fields[2]), "note": fields[3] if len(fields) > 3 else ""}
    checks = []
    # gpu-check.sh --rehearse: every stage a CPU can run, on the CPU. Its
    # figures check the script and the runs' settings, never a GPU: what
    # only a device can pass (one visible, its tests run) is "not run".
    rehearsal = "rehearsal" in stages

    def check(name, ok, figure, goal):
        checks.append({"check": name, "result": "pass" if ok else "FAIL" if ok is not None else "not run",
                       "figure": figure, "goal": goal})

    devices = json.loads((out / "devices.json").read_text()) if (out / "devices.json").exists() else {}
    if devices and rehearsal:
        check("devices", None, f"rehearsal on {devices['devices'][0].get('device')}", "a CUDA device visible")
    elif devices:
        d = devices["devices"][0]
        check("devices", devices.get("cuda_devices", 0) > 0,
              f"{devices['cuda_devices']} x {d.get('device')}, driver CUDA {d.get('cuda_driver')}, runtime "
              f"{d.get('cuda_runtime')}, NCCL {d.get('nccl_version')}, torch {devices.get('torch_version')}",
              "a CUDA device visible")
    else:
        check("devices", None, "", "a CUDA device visible")

    tests = json.loads((out / "gpu_tests.json").read_text()) if (out / "gpu_tests.json").exists() else None
    if tests:
        cases = [t for suite in tests.get("testsuites", []) for t in suite.get("testsuite", [])]
        failed = [t["name"] for t in cases if t.get("failures")]
        skipped = [t["name"] for t in cases if t.get("result") == "SKIPPED"]
        # A rehearsal has no GPU: its cases skip, and only a failure counts.
        check("gpu_tests", None if rehearsal and not failed else not failed and not skipped,
              f"{len(cases) - len(failed) - len(skipped)}/{len(cases)} passed"
              + (f"; failed: {', '.join(failed)}" if failed else "") + (f"; skipped: {', '.join(skipped)}" if skipped else ""),
              "every gpu case passes")
    else:
        check("gpu_tests", None, "", "every gpu case passes")

    def parity(name, run, reference, rtol, differs_above=None):
        diff = max_relative_difference(read_steps(out / run), read_steps(out / reference))
        if diff is None:
            check(name, None, f"{run} or {reference} did not finish", f"<= {rtol:g}")
            return
        ok = diff <= rtol and (differs_above is None or diff > differs_above)
        goal = f"<= {rtol:g}" + (f" and > {differs_above:g} (bf16 in effect)" if differs_above else "")
        check(name, ok, f"max relative loss difference {diff:.3g} over {len(read_steps(out / run))} steps", goal)

    parity("fp32 cuda vs cpu", "fp32_cuda", "fp32_cpu", 1e-5)
    parity("recompute vs keeping activations, fp32 on cuda", "fp32_cuda_recompute", "fp32_cuda", 1e-6)
    parity("bf16 vs fp32 on cuda", "bf16_cuda", "fp32_cuda", 2e-3, differs_above=1e-6)
    parity("bf16 with a bf16 residual stream vs fp32 on cuda", "bf16_residual_cuda", "fp32_cuda", 2e-3,
           differs_above=1e-6)
    sync = stages.get("host_sync")
    check("no host sync in a step", None if sync is None else sync["exit"] == "0",
          "3 steps with every synchronising operation an error" if sync else "", "the run finishes")

    def throughput(name, run):
        """The run's MFU (goal 45 %) and its phases against its wall time; its summary, or None."""
        summary_path = out / run / "summary.json"
        s = json.loads(summary_path.read_text()) if summary_path.exists() else None
        if not s:
            check(name, None, "the run did not finish", "MFU >= 45 %")
            return None
        steps = read_steps(out / run)[s.get("warmup_steps", 0):]
        ratios = [sum(l["phases"].values()) / l["step_seconds"] for l in steps]
        ratio = sum(ratios) / len(ratios)
        check(name, s["mfu"] >= 0.45,
              f"{s['tflops_per_gpu']:.1f} TFLOPS/GPU, MFU {100 * s['mfu']:.1f} % ({s.get('peak_source', '')}), "
              f"{s['step_seconds_median']:.3f} s/step; weight gradients "
              f"{'summed in fp32 by the GEMM' if s.get('gemm_adds_into_fp32') else 'made in bf16, then added'}",
              "MFU >= 45 %")
        check(f"{name}: phase times vs step wall time", 0.8 <= ratio <= 1.05,
              f"phases sum to {100 * ratio:.1f} % of the step's wall time", "80-105 %")
        return s

    # The step-time model on this GPU: hetpar plan's prediction for a throughput run's own layout.
    def model(name, plan_dir, s, published):
        plan_path = out / plan_dir / "plan.json"
        plan = json.loads(plan_path.read_text()) if plan_path.exists() else {}
        given = plan.get("given")
        if not given or not s:
            check(name, None, "no prediction" if not given else "no measurement", "within 15 %")
            return
        error = given["step_seconds"] / s["step_seconds_median"] - 1
        figure = f"predicted {given['step_seconds']:.3f} s/step ({100 * error:+.1f} %)"
        if published and plan.get("profile"):
            figure = f"{Path(plan['profile']).name}: {figure}"
        # The allocator counts tensors alone: the model's fullest rank less its reserved part (the CUDA context).
        measured_tensors = s.get("peak_tensor_mib") or s.get("peak_memory_mib")
        if measured_tensors:
            reserved = given.get("fullest_rank_bytes", {}).get("reserved", 0)
            tensors = (given["peak_memory_bytes"] - reserved) / 2**20
            memory_error = tensors / measured_tensors - 1
            figure += f", tensor memory {tensors / 1024:.1f} GiB ({100 * memory_error:+.1f} %)"
        check(name, abs(error) <= 0.15, figure, "step time within 15 %")

    s = throughput("throughput (8B-shaped layers, bf16)", "throughput")
    model("step-time model, published profile", "plan_published", s, True)
    model("step-time model, measured profile", "plan_measured", s, False)
    s16 = throughput("throughput, bf16 residual stream", "throughput_bf16_residual")
    model("step-time model, bf16 residual stream, published profile", "plan_published_bf16_residual", s16, True)

    if "multi_gpu" in stages:
        check("multi-GPU NCCL parity", None, stages["multi_gpu"]["note"], "colocated, non-colocated <= 1e-5")
    else:
        parity("colocated 2 GPUs vs uniform 2", "colocated_2", "uniform_2", 1e-5)
        parity("colocated, LLM sequence parallel, 2 GPUs vs uniform 2", "colocated_2_sp", "uniform_2", 1e-5)
        parity("non-colocated 2 GPUs vs 1", "noncolocated_2", "fp32_cuda", 1e-5)
        # The DP sums started during the last backward on NCCL: the same losses to the bit as after it.
        parity("DP sums in the backward vs after it, 2 GPUs", "uniform_2", "uniform_2_sums_after", 0.0)
        # The same losses to the bit on CPU; 1e-6 allows a GPU kernel's rounding by position.
        parity("optimizer state sharded vs whole, 2 GPUs", "uniform_2_sharded", "uniform_2", 1e-6)
        run_summary = out / "uniform_2" / "summary.json"
        buckets = json.loads(run_summary.read_text()).get("grad_buckets") if run_summary.exists() else None
        check("DP buckets started in the backward, 2 GPUs", buckets["started_in_backward"] > 0 if buckets else None,
              f"{buckets['started_in_backward']} of {buckets['buckets']} on rank 0" if buckets else "no summary",
              "more than 0")

    report = {"format": "hetpar-gpu-check/1", "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "rehearsal": rehearsal, "devices": devices, "stages": stages, "checks": checks}
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    width = max(len(c["check"]) for c in checks)
    if rehearsal:
        print("REHEARSAL on the CPU (gpu-check.sh --rehearse): the script and its runs checked; nothing ran on a GPU")
    print(f"{'check':<{width}}  result   figure (goal)")
    for c in checks:
        print(f"{c['check']:<{width}}  {c['result']:<7}  {c['figure']} ({c['goal']})")
    failed_stages = [n for n, s in stages.items() if s["exit"] not in ("0", "skipped")]
    if failed_stages:
        print(f"stages that failed: {', '.join(failed_stages)} (their logs: {out}/<stage>.log)")
    print(f"written: {out / 'gpu-check.json'}")
    return 0 if all(c["result"] in ("pass", "not run") for c in checks) and not failed_stages else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--published-profile":
        print(published_profile(sys.argv[2]))
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_check_report.py OUT_DIR | --published-profile DEVICES_JSON")
    sys.exit(main(sys.argv[1]))
