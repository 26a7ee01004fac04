#!/usr/bin/env python3
"""Built-in step-time-model profiles for GPU clusters, from published figures.

Writes profiles/h100_dgx.json, profiles/h200_dgx.json and profiles/a100_dgx.json
("hetpar-profile/1", read by src/plan/profile.cpp): 8 GPUs a node on NVLink +
NVSwitch, one InfiniBand NIC per GPU between nodes. Nothing is measured here:
every number is a published figure (the INPUTS tables below, each with its
source key) or derived from one by a formula in this file. docs/gpu-profiles.md
lists every source (URL and title), every formula, and every assumption.

    scripts/gpu_profiles.py                 # (re)write the three profiles
    scripts/gpu_profiles.py --check         # exit 1 if a committed profile is stale
    scripts/gpu_profiles.py --out-dir DIR   # write them elsewhere

Python 3 standard library only; the output is deterministic (sorted keys,
indent 1, four significant digits).
"""

import argparse
import json
import math
import os
import sys

MiB = 1 << 20
GB = 1e9
US = 1e-6  # a microsecond

# --------------------------------------------------------------------------
# INPUTS. Source keys in [brackets] are the rows of the sources table in
# docs/gpu-profiles.md (URL and title there). "assumption" marks a value no
# source gives directly; the docs say how it was chosen.
# --------------------------------------------------------------------------

# The two chips. H200 is the H100's GH100 die, clocks and NVLink 4 with more
# and faster HBM [H200-PAGE], so the Hopper compute and NVLink inputs are shared.
HOPPER = {
    "peak_bf16_flops": 989e12,       # [H100-DS] [H200-PAGE]: 1,979 TFLOPS BF16 "with sparsity"; dense is half
    "sms": 132,                      # [HOPPER-WP]: 132 SMs on the SXM5 part
    # GEMM (bf16 in, fp32 accumulate)
    "gemm_best_efficiency": 0.803,   # [GEMM-MAX]: 794.5 of 989 TFLOPS, best shape 2048x2048x13312
    "gemm_k_half": 512,              # assumption: k at which the main loop is 2/3 of a tile's time (A100's 256, scaled)
    # fused attention, forward: efficiency at long sequences by padded head dim
    "attention_efficiency": {64: 0.50, 96: 0.57, 128: 0.64, 256: 0.75},  # [ATTN-PAPER-3] 75% at 256; [ATTN-BENCH] fit at 128; 64/96 assumption
    "attention_seq_half": 240,       # [ATTN-BENCH]: fitted, seq at which a non-causal forward runs at half its long-sequence rate
    # NVLink 4 + NVSwitch, ring collectives (the collective benchmark's bus bandwidth)
    "nvlink_per_direction": 450 * GB,  # [HOPPER-WP]: 18 links, 900 GB/s both directions together
    "all_reduce_bus_intra": 365 * GB,  # [GTC24] 370 (H100); [OPEN-BOOK-NET] 365.6 ring on 8x H200, 363.3 on 4
    "gather_bus_intra": 362 * GB,      # [OPEN-BOOK-NET]: all-gather 361.4, reduce-scatter 362.9 (8x H200)
    "all_to_all_bus_intra": 320 * GB,  # [GTC25] slide 13: all-to-all, NVLink4 (H100), 8 GPUs
    "send_recv_intra": 376 * GB,       # [OPEN-BOOK-NET]: H100 peer-to-peer writes ~376 GB/s (H200 copy: 396)
}
AMPERE = {
    "peak_bf16_flops": 312e12,       # [A100-DS]: BF16 312 TFLOPS dense (624 with sparsity)
    "sms": 108,                      # [AMPERE-WP]: 108 SMs
    "gemm_best_efficiency": 0.869,   # [GEMM-MAX]: 271.2 of 312 TFLOPS, best shape 1024x10240x5120
    "gemm_k_half": 256,              # [A100-GEMM-BLOG] fig. 6: fitted with the fill curve below (square sizes 512..8192)
    "attention_efficiency": {64: 0.66, 96: 0.69, 128: 0.72, 256: 0.73},  # [ATTN-PAPER-2]: "50-73% of the theoretical maximum" forward
    "attention_seq_half": 96,        # assumption: H100's fit scaled by per-SM tensor rate over per-SM bandwidth
    "nvlink_per_direction": 300 * GB,  # [AMPERE-WP]: 12 links, 600 GB/s both directions together
    "all_reduce_bus_intra": 232 * GB,  # [GTC24] [GTC25]: NVLink3 (A100), 8 GPUs; [OPEN-BOOK-NET] 234.9
    "gather_bus_intra": 232 * GB,      # assumption: ring all-gather/reduce-scatter at the ring all-reduce's bus bandwidth
    "all_to_all_bus_intra": 210 * GB,  # [GTC25] slide 13: all-to-all, NVLink3 (A100), 8 GPUs
    "send_recv_intra": 274 * GB,       # [OPEN-BOOK-NET]: A100 peer-to-peer writes 274 GB/s
}

# The three parts: memory and the node's network.
DEVICES = {
    "h100": {
        "chip": HOPPER,
        "device": "NVIDIA H100 SXM5 80GB",
        "node": "8 GPUs, NVLink 4 + NVSwitch, one 400 Gb/s NIC per GPU",
        "hbm_bytes_per_second": 3.35e12,     # [H100-DS]: 3.35 TB/s HBM3
        "memory_bytes": 81559 * MiB,         # [H100-DS] "80GB"; device query memory.total 81,559 MiB
        "nic_bus": 48 * GB,                  # [GTC24] [GTC25]: 400 Gb/s RDMA all-reduce bus bandwidth 48 GB/s
        "nic_line_rate": 400e9 / 8,          # [DGX-H100]: 8x ConnectX-7, 400 Gb/s each
    },
    "h200": {
        "chip": HOPPER,
        "device": "NVIDIA H200 SXM 141GB",
        "node": "8 GPUs, NVLink 4 + NVSwitch, one 400 Gb/s NIC per GPU",
        "hbm_bytes_per_second": 4.8e12,      # [H200-PAGE]: 4.8 TB/s HBM3e
        "memory_bytes": 143771 * MiB,        # [H200-PAGE] "141GB"; device query memory.total 143,771 MiB
        "nic_bus": 48 * GB,                  # as H100: the DGX H200 has the same eight 400 Gb/s NICs [DGX-H100]
        "nic_line_rate": 400e9 / 8,
    },
    "a100": {
        "chip": AMPERE,
        "device": "NVIDIA A100 SXM4 80GB",
        "node": "8 GPUs, NVLink 3 + NVSwitch, one 200 Gb/s NIC per GPU",
        "hbm_bytes_per_second": 2.039e12,    # [A100-DS]: 2,039 GB/s HBM2e (80GB SXM)
        "memory_bytes": 81920 * MiB,         # [A100-DS] "80GB"; device query memory.total 81,920 MiB
        "nic_bus": 24 * GB,                  # [GTC24] [GTC25]: 200 Gb/s RDMA all-reduce bus bandwidth 24 GB/s
        "nic_line_rate": 200e9 / 8,          # [DGX-A100]: 8x ConnectX-6 HDR, 200 Gb/s each
    },
}

GPUS_PER_NODE = 8                # [DGX-H100] [DGX-A100]

# GEMM shape model (both chips).
GEMM_TILE = 128 * 256            # [MATMUL-GUIDE]: the vendor BLAS library's largest (most efficient) tile, 256x128 outputs
GEMM_WAVE_LOSS = 0.5             # [MATMUL-GUIDE] wave quantization: on average half a wave idles (fitted on [A100-GEMM-BLOG])
GEMM_BEST_FILL = 0.97 * 0.96     # fill and depth terms of the [GEMM-MAX] best shapes (one full wave, k >= 5120)

# Attention model (both chips).
ATTENTION_HEAD_DIMS = (64, 96, 128, 192, 256)  # [ATTN-PAPER-2] [ATTN-PAPER-3]: head dims the kernels are compiled for (pad up)
CAUSAL_SEQ_HALF_FACTOR = 2.0     # assumption: causal masking doubles the short-sequence overhead ([ATTN-PAPER-2] [ATTN-PAPER-3] figures: causal lower at short seq)
BACKWARD_EFFICIENCY_RATIO = 0.8  # assumption: backward kernels at 0.8 of the forward's efficiency ([ATTN-PAPER-2] [ATTN-PAPER-3] figures)
BACKWARD_FLOPS_RATIO = 2.5       # 5 matmuls backward (recomputed QK^T, dV, dP, dQ, dK) against 2 forward
ATTENTION_TOKENS = 16384         # [ATTN-PAPER-2] [ATTN-PAPER-3] [ATTN-BENCH]: batch x seq = 16k tokens, 16 heads, as benchmarked
ATTENTION_HEADS = 16

# Memory-bound ops: achievable fraction of the HBM bandwidth at large sizes.
STREAM_FRACTION = {              # [HBM-BENCH]: 2,903 GB/s device copy on H100 = 86.7%; [A100-PAGE] "95%" DRAM utilization
    "add": 0.85,                 # elementwise: read 2, write 1
    "gelu": 0.85,                # elementwise: read 1, write 1
    "rms_norm": 0.78,            # assumption: a row reduction costs ~8% against a plain stream
    "layer_norm": 0.78,
}
KERNEL_OVERHEAD = 2 * US         # assumption: a small kernel's fixed time (launch gap, ramp, tail)
GEMM_STREAM_FRACTION = 0.85      # a GEMM streaming its operands, as an elementwise op

# Collectives: the vendor collective library's own latency model [TUNING], in
# microseconds, LL128 protocol (its choice for the mid sizes where latency matters).
BASE_LATENCY = 14.0 * US         # [TUNING] baseLatencies, Ring and Tree, LL128
NVLINK_HOP = 1.9 * US            # [TUNING] hwLatencies NVLINK, Ring, LL128
NET_HOP = 8.5 * US               # [TUNING] hwLatencies NET, Tree, LL128 (also what it uses for rings at one rank a node)
PAT_BASE = 8.0 * US              # [TUNING] baseLatencies PAT (all-gather/reduce-scatter at one rank a node)
PAT_NET = 14.0 * US / 3.5        # [TUNING] PAT: log2(nodes) x NET Simple latency / 3.5 ...
PAT_PER_RANK = 2.8 * US          # [TUNING] ... + 2.8 us per rank
ALL_TO_ALL_NET_PEER = 1.0 * US   # assumption: the proxy's cost of one more peer in an inter-node all-to-all

INTRA_GROUPS = (2, 4, 8)
INTER_GROUPS = tuple(2 ** i for i in range(1, 11))  # 2 .. 1024 nodes, one member each

# Reserved per rank (the runtime's own memory), all assumptions:
CONTEXT_BYTES = 0.6e9            # the GPU runtime's context and the part of memory.total a process cannot allocate
COLLECTIVE_BUFFER_BYTES = 1.0e9  # the collective library's buffers for a rank's few communicators
FRAGMENTATION = 0.03             # the caching allocator's fragmentation, of the device's capacity

GEMM_SIZES = tuple(2 ** i for i in range(7, 18))     # 128 .. 131072 for m, n and k
ATTENTION_SEQS = (256, 576, 1024, 2048, 4096, 8192, 16384, 32768)
ATTENTION_DIMS = (64, 72, 80, 96, 100, 128)
MEMORY_BYTES = tuple(round(10 ** (6 + i / 2)) for i in range(7))  # 1e6 .. 1e9


def sig(x, digits=4):
    """x to `digits` significant digits: short, deterministic JSON."""
    return float(f"{x:.{digits}g}")


# --------------------------------------------------------------------------
# Derivations shared by the device families.
# --------------------------------------------------------------------------

def gemm_efficiency(chip, m, n, k):
    """Fraction of peak a bf16 GEMM C[m,n] = A[m,k] B[k,n] reaches when compute-bound.

    fill: output tiles over the SMs, averaged over wave quantization;
    depth: the main loop's share of a tile's time against its fixed prologue
    and epilogue; per_wave: the efficiency of a full wave at large k,
    calibrated so the best measured shape lands on the published maximum.
    """
    waves = m * n / (chip["sms"] * GEMM_TILE)
    fill = waves / (waves + GEMM_WAVE_LOSS)
    depth = k / (k + chip["gemm_k_half"])
    per_wave = chip["gemm_best_efficiency"] / GEMM_BEST_FILL
    return min(chip["gemm_best_efficiency"], per_wave * fill * depth)


def gemm_rate(dev, m, n, k):
    chip = dev["chip"]
    flops = 2.0 * m * n * k
    compute = flops / (chip["peak_bf16_flops"] * gemm_efficiency(chip, m, n, k))
    memory = 2.0 * (m * k + k * n + m * n) / (GEMM_STREAM_FRACTION * dev["hbm_bytes_per_second"])
    return flops / max(compute, memory)


def gemm_entries(dev):
    return [{"m": m, "n": n, "k": k, "flops_per_second": sig(gemm_rate(dev, m, n, k))}
            for m in GEMM_SIZES for n in GEMM_SIZES for k in GEMM_SIZES]


def attention_efficiency(chip, seq, head_dim, causal):
    """Forward efficiency of a fused attention kernel (useful FLOPs over peak)."""
    padded = min(d for d in ATTENTION_HEAD_DIMS if d >= head_dim)
    long_seq = chip["attention_efficiency"][padded] if padded in chip["attention_efficiency"] else \
        _interpolate_log(chip["attention_efficiency"], padded)
    half = chip["attention_seq_half"] * (CAUSAL_SEQ_HALF_FACTOR if causal else 1.0)
    return long_seq * (head_dim / padded) * seq / (seq + half)


def _interpolate_log(table, x):
    keys = sorted(table)
    lo = max(k for k in keys if k <= x)
    hi = min(k for k in keys if k >= x)
    if lo == hi:
        return table[lo]
    t = math.log(x / lo) / math.log(hi / lo)
    return table[lo] + t * (table[hi] - table[lo])


def attention_entries(dev):
    chip = dev["chip"]
    out = []
    for seq in ATTENTION_SEQS:
        batch = max(1, round(ATTENTION_TOKENS / seq))
        for head_dim in ATTENTION_DIMS:
            for causal in (False, True):
                flops = 4.0 * batch * ATTENTION_HEADS * seq * seq * head_dim * (0.5 if causal else 1.0)
                eff = attention_efficiency(chip, seq, head_dim, causal)
                forward = flops / (chip["peak_bf16_flops"] * eff)
                backward = BACKWARD_FLOPS_RATIO * flops / (chip["peak_bf16_flops"] * eff * BACKWARD_EFFICIENCY_RATIO)
                out.append({"batch": batch, "heads": ATTENTION_HEADS, "seq": seq, "head_dim": head_dim,
                            "causal": causal, "forward_seconds": sig(forward), "backward_seconds": sig(backward),
                            "forward_flops_per_second": sig(flops / forward)})
    return out


def memory_bound_entries(dev):
    out = []
    for op, fraction in STREAM_FRACTION.items():
        for size in MEMORY_BYTES:
            seconds = KERNEL_OVERHEAD + size / (fraction * dev["hbm_bytes_per_second"])
            out.append({"op": op, "bytes": size, "bytes_per_second": sig(size / seconds)})
    return out


def _collective(op, group, scope, latency, bytes_per_second, bus=None):
    entry = {"op": op, "group_size": group, "scope": scope, "latency_seconds": sig(latency),
             "bytes_per_second": sig(bytes_per_second)}
    if bus is not None:
        entry["bus_bytes_per_second"] = sig(bus)  # the benchmark's bus bandwidth it comes from (not read)
    if scope == "inter_node":
        entry["members_per_node"] = 1  # the model's group shape (not read): see docs/gpu-profiles.md
    return entry


def collective_entries(dev):
    """Alpha-beta entries: seconds = latency_seconds + bytes / bytes_per_second.

    bytes is the whole tensor: the all-reduced buffer, all-gather's output,
    reduce-scatter's input, the buffer one rank sends in an all-to-all, the
    point-to-point message. A bus bandwidth B (the collective benchmark's
    figure, what each rank's link carries) turns into bytes_per_second as
    B g / (2 (g-1)) for an all-reduce and B g / (g-1) for the others.
    """
    chip = dev["chip"]
    out = []
    # Within a node: every GPU has its full NVLink bandwidth to any peer through the NVSwitches.
    for g in INTRA_GROUPS:
        ar_bus, ag_bus, a2a_bus = chip["all_reduce_bus_intra"], chip["gather_bus_intra"], chip["all_to_all_bus_intra"]
        out.append(_collective("all_reduce", g, "intra_node", BASE_LATENCY + 2 * (g - 1) * NVLINK_HOP,
                               ar_bus * g / (2 * (g - 1)), ar_bus))
        for op in ("all_gather", "reduce_scatter"):
            out.append(_collective(op, g, "intra_node", BASE_LATENCY + (g - 1) * NVLINK_HOP, ag_bus * g / (g - 1), ag_bus))
        out.append(_collective("all_to_all_v", g, "intra_node", BASE_LATENCY + (g - 1) * NVLINK_HOP,
                               a2a_bus * g / (g - 1), a2a_bus))
    out.append(_collective("send_recv", 2, "intra_node", BASE_LATENCY + NVLINK_HOP, chip["send_recv_intra"]))
    # Across nodes, one member a node: every byte a rank sends crosses its own NIC.
    nic = dev["nic_bus"]
    for g in INTER_GROUPS:
        hops = math.log2(g)
        out.append(_collective("all_reduce", g, "inter_node", BASE_LATENCY + 2 * hops * NET_HOP,
                               nic * g / (2 * (g - 1)), nic))
        ring = BASE_LATENCY + (g - 1) * NET_HOP
        pat = PAT_BASE + hops * PAT_NET + g * PAT_PER_RANK
        for op in ("all_gather", "reduce_scatter"):
            out.append(_collective(op, g, "inter_node", min(ring, pat), nic * g / (g - 1), nic))
        out.append(_collective("all_to_all_v", g, "inter_node", BASE_LATENCY + NET_HOP + (g - 1) * ALL_TO_ALL_NET_PEER,
                               nic * g / (g - 1), nic))
    out.append(_collective("send_recv", 2, "inter_node", BASE_LATENCY + NET_HOP, nic))
    return out


def check_inputs(dev):
    """The achieved figures cannot beat the links they run on."""
    chip = dev["chip"]
    for key in ("all_reduce_bus_intra", "gather_bus_intra", "all_to_all_bus_intra", "send_recv_intra"):
        assert chip[key] <= chip["nvlink_per_direction"], (dev["device"], key)
    assert dev["nic_bus"] <= dev["nic_line_rate"], dev["device"]


def build_profile(dev, family):
    check_inputs(dev)
    memory = dev["memory_bytes"]
    return {
        "format": "hetpar-profile/1",
        "published": {"device": dev["device"], "node": dev["node"], "family": family,
                      "sources": "docs/gpu-profiles.md", "generated_by": "scripts/gpu_profiles.py"},
        "measured": {"device": dev["device"] + " (published figures)", "cores": 1, "ranks": 1, "backend": "nccl"},
        "element_bytes": 2,
        "peak_flops_per_second": dev["chip"]["peak_bf16_flops"],
        "gpus_per_node": GPUS_PER_NODE,
        "memory": {"bytes_per_device": memory, "shared_by_all_ranks": False,
                   "reserved_bytes": round(CONTEXT_BYTES + COLLECTIVE_BUFFER_BYTES + FRAGMENTATION * memory)},
        "gemm": gemm_entries(dev),
        "attention": attention_entries(dev),
        "memory_bound": memory_bound_entries(dev),
        "collectives": collective_entries(dev),
    }


# --------------------------------------------------------------------------
# One function per device family.
# --------------------------------------------------------------------------

def h100_dgx():
    """DGX H100: 8x H100 SXM5 80GB, NVLink 4 + NVSwitch, 8x 400 Gb/s InfiniBand."""
    return build_profile(DEVICES["h100"], "Hopper")


def h200_dgx():
    """DGX H200: the H100 node with 141 GB of HBM3e at 4.8 TB/s."""
    return build_profile(DEVICES["h200"], "Hopper")


def a100_dgx():
    """DGX A100: 8x A100 SXM4 80GB, NVLink 3 + NVSwitch, 8x 200 Gb/s HDR InfiniBand."""
    return build_profile(DEVICES["a100"], "Ampere")


PROFILES = {"h100_dgx.json": h100_dgx, "h200_dgx.json": h200_dgx, "a100_dgx.json": a100_dgx}


def render(profile):
    return json.dumps(profile, sort_keys=True, indent=1) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out-dir", default=os.path.join(root, "profiles"))
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args(argv)
    stale = []
    for name, build in PROFILES.items():
        path = os.path.join(args.out_dir, name)
        text = render(build())
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
            continue
        os.makedirs(args.out_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {path} ({len(text) // 1024} KiB)")
    if stale:
        print("stale (rerun scripts/gpu_profiles.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
