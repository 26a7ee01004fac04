#!/usr/bin/env bash
# The one prepared check for a GPU machine. From a clean tree it builds hetpar
# there (every core; against the machine's own LibTorch, offline, with a
# dependency bundle where the system lacks the C++ libraries) and checks, in
# under 10 minutes on one GPU, what no CPU can:
#   devices   the device, driver, CUDA, NCCL versions and the libraries loaded
#   gpu_tests the `gpu` GoogleTest cases: NCCL communicator, OOM recovery,
#             allocator peak, CUDA-event phase times, the bounded step wait
#   fp32      fp32 (TF32 off) on CUDA against the CPU, 10 steps: <= 1e-5 rel.
#   recompute fp32 on CUDA with run.recompute = full (each layer's forward
#             again on the device's backward thread) against fp32 on CUDA:
#             <= 1e-6 rel. (bit-identical on CPU; a GPU kernel may sum in
#             another order from run to run)
#   bf16      bf16 on CUDA against fp32 on CUDA: within the CPU-established
#             bf16 tolerance (2e-3), and not equal (bf16 in effect)
#   host_sync a CUDA step that never blocks the host (any hidden sync throws)
#   throughput Llama-3-8B-shaped layers in bf16: TFLOPS, MFU (goal >= 45 %),
#             the phases' sum against the step's wall time, and the last
#             step's kernels by GPU time (throughput/profile_rank0.txt)
#   calibrate hetpar calibrate on this GPU (bf16 GEMM, attention, memory-bound
#             rates; collectives from the published profile with one GPU)
#   prediction the throughput run's step time and peak memory predicted from
#             the published profile and from the measured one (hetpar plan's
#             "given" layout), against the measurement
#   multi_gpu with >= 2 GPUs: colocated and non-colocated fp32 parity on NCCL
#             (boundary all-to-all-v and point-to-point), colocated with
#             the LLM sequence parallel (all-gather, reduce-scatter over
#             TP), and DP 2 with its
#             gradient buckets started during the backward against the same
#             run summing after it (the same losses to the bit); skipped
#             with 1 GPU
# It writes OUT/gpu-check.json and prints a table. Without a GPU it exits 3
# in seconds with "no CUDA device visible".
#
# Usage: scripts/gpu-check.sh [--python PY] [--bundle DIR] [--build DIR] [--prebuilt] [--rehearse] [--out DIR]
#   PY:     the python whose torch to build against (default: python3)
#   DIR:    scripts/offline-bundle.sh's folder, when the system lacks the libraries
#   --prebuilt: take hetpar and test_gpu from the --build folder as they are
#           (built elsewhere against this machine's LibTorch) instead of building
#   --rehearse: the script itself checked on a machine without a GPU, before
#           GPU time is spent on it: every stage that a CPU can run, as it is
#           written, with the device cpu (2 Gloo ranks for the multi-GPU
#           stages), from --prebuilt binaries; the throughput run and the
#           calibration are skipped. Its report says REHEARSAL: no GPU check.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=python3 BUNDLE="" BUILD=build-gpu OUT=results/gpu-check PREBUILT=0 REHEARSE=0
while (($#)); do
  case "$1" in
    --python) PY="$2"; shift 2 ;;
    --bundle) BUNDLE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --prebuilt) PREBUILT=1; shift ;;
    --rehearse) REHEARSE=1 PREBUILT=1; shift ;;
    *) echo "gpu-check: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

# Prebuilt binaries (also for a rehearsal) are looked for before anything is written.
if ((PREBUILT)) && ! [[ -x "$BUILD/hetpar" && -x "$BUILD/test_gpu" ]]; then
  echo "gpu-check: $( ((REHEARSE)) && echo --rehearse || echo --prebuilt) takes hetpar and test_gpu from --build $BUILD:" \
    "not there (build them, or name their folder with --build)" >&2
  exit 2
fi

# Only into a folder gpu-check made (its marker) or an empty or absent one:
# never over a user's files.
if [[ -e "$OUT" && ! -f "$OUT/.hetpar-gpu-check" && -n "$(ls -A "$OUT" 2>/dev/null)" ]]; then
  echo "gpu-check: --out $OUT is not empty and was not made by gpu-check (no .hetpar-gpu-check marker); choose another --out" >&2
  exit 2
fi

# No device node and no nvidia-smi answer: nothing to check, said at once.
if ((!REHEARSE)) && ! compgen -G "/dev/nvidia[0-9]*" >/dev/null && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no CUDA device visible" >&2
  exit 3
fi

mkdir -p "$OUT" && touch "$OUT/.hetpar-gpu-check" || exit 2
OUT="$(cd "$OUT" && pwd)"
STAGES="$OUT/stages.tsv"
: >"$STAGES"
T0=$SECONDS
DEVICE=cuda
if ((REHEARSE)); then
  DEVICE=cpu
  printf 'rehearsal\tskipped\t0\ton the CPU, 2 Gloo ranks for the multi-GPU stages: the script checked, no GPU\n' >>"$STAGES"
fi

# stage NAME LIMIT_S COMMAND...: runs it with a time limit, its output in
# OUT/NAME.log; records the name, exit code and seconds.
stage() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "gpu-check: $name ..." >&2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local code=$?
  printf '%s\t%d\t%d\n' "$name" "$code" $((SECONDS - start)) >>"$STAGES"
  ((code == 0)) || { echo "gpu-check: $name failed (exit $code), see $OUT/$name.log" >&2; tail -5 "$OUT/$name.log" >&2; }
  return $code
}
skip() { printf '%s\tskipped\t0\t%s\n' "$1" "$2" >>"$STAGES"; }

export PATH=/usr/local/cuda/bin:$PATH
CMAKE_ARGS=(-S . -B "$BUILD" -G Ninja -DHETPAR_PYTHON="$PY")
[[ -n "$BUNDLE" ]] && CMAKE_ARGS+=(-DHETPAR_BUNDLE="$(cd "$BUNDLE" && pwd)")
if ((PREBUILT)); then
  skip build "prebuilt binaries from $BUILD"
elif ! stage build 420 bash -c "cmake ${CMAKE_ARGS[*]} && cmake --build $BUILD -j $(nproc) --target hetpar test_gpu"; then
  "$PY" scripts/gpu_check_report.py "$OUT"
  exit 1
fi
HETPAR="$BUILD/hetpar"
# Held-out losses after steps 3, 6 and 9 (forward only): the comparisons below hold them to the same tolerance.
TINY="workloads/tiny.toml --set run.steps=10 --set run.eval_every=3 --set data.global_batch_size=4 --set data.micro_batch_size=2"

stage devices 60 bash -c "$HETPAR devices $( ((REHEARSE)) || echo --require-gpu) >$OUT/devices.json"
[[ $? -eq 3 ]] && { echo "gpu-check: no CUDA device visible" >&2; exit 3; }
stage gpu_tests 120 "$BUILD/test_gpu" --gtest_output="json:$OUT/gpu_tests.json"
stage fp32_cuda 120 $HETPAR train $TINY --set runtime.device=$DEVICE --set run.precision=fp32 --out "$OUT/fp32_cuda" &&
  stage fp32_cpu 120 $HETPAR train $TINY --set runtime.device=cpu --out "$OUT/fp32_cpu" &&
  stage fp32 30 $HETPAR compare "$OUT/fp32_cuda" "$OUT/fp32_cpu" --rtol 1e-5
stage fp32_cuda_recompute 120 $HETPAR train $TINY --set runtime.device=$DEVICE --set run.precision=fp32 \
  --set run.recompute=full --out "$OUT/fp32_cuda_recompute" &&
  stage recompute 30 $HETPAR compare "$OUT/fp32_cuda_recompute" "$OUT/fp32_cuda" --rtol 1e-6
stage bf16_cuda 120 $HETPAR train $TINY --set runtime.device=$DEVICE --set run.precision=bf16 --out "$OUT/bf16_cuda" &&
  stage bf16 30 $HETPAR compare "$OUT/bf16_cuda" "$OUT/fp32_cuda" --rtol 2e-3 &&
  { ! $HETPAR compare "$OUT/bf16_cuda" "$OUT/fp32_cuda" --rtol 1e-6 >"$OUT/bf16_differs.log" 2>&1 ||
    { printf 'bf16_in_effect\t1\t0\n' >>"$STAGES"; false; }; }
# The residual stream in bf16 too (run.fp32_residual = false): the norms bypass autocast on the device.
stage bf16_residual_cuda 120 $HETPAR train $TINY --set runtime.device=$DEVICE --set run.precision=bf16 \
  --set run.fp32_residual=false --out "$OUT/bf16_residual_cuda" &&
  stage bf16_residual 30 $HETPAR compare "$OUT/bf16_residual_cuda" "$OUT/fp32_cuda" --rtol 2e-3
stage host_sync 120 env HETPAR_CHECK_HOST_SYNCS=1 TORCH_SHOW_CPP_STACKTRACES=1 $HETPAR train $TINY --set runtime.device=$DEVICE --set run.steps=3 \
  --out "$OUT/host_sync"
THROUGHPUT=workloads/runs/gpu_check_llama8b_layers.toml
# The published profile of the chip in the machine (gpu_check_report.py says which).
PUBLISHED=$("$PY" scripts/gpu_check_report.py --published-profile "$OUT/devices.json")
if ((REHEARSE)); then
  skip throughput "rehearsal: Llama-3-8B-shaped layers need a GPU"
  skip throughput_bf16_residual "rehearsal: Llama-3-8B-shaped layers need a GPU"
  skip calibrate "rehearsal: needs a GPU"
else
  # The last step's op profile (host operators and GPU kernels): where the time goes.
  stage throughput 300 $HETPAR train $THROUGHPUT --set runtime.profile_step=12 --out "$OUT/throughput"
  # The same with a bf16 residual stream: half the bytes of its norms, adds and TP input gradients.
  stage throughput_bf16_residual 300 $HETPAR train $THROUGHPUT --set run.fp32_residual=false \
    --out "$OUT/throughput_bf16_residual"
  stage calibrate 240 $HETPAR calibrate --device cuda --base $PUBLISHED --out "$OUT/profile_measured.json"
fi
stage predict_published 60 $HETPAR plan $THROUGHPUT --devices 1 --top 1 --profile $PUBLISHED --out "$OUT/plan_published"
stage predict_published_bf16_residual 60 $HETPAR plan $THROUGHPUT --devices 1 --top 1 --profile $PUBLISHED \
  --set run.fp32_residual=false --out "$OUT/plan_published_bf16_residual"
[[ -f "$OUT/profile_measured.json" ]] &&
  stage predict_measured 60 $HETPAR plan $THROUGHPUT --devices 1 --top 1 --profile "$OUT/profile_measured.json" \
    --out "$OUT/plan_measured"

GPUS=$("$PY" -c "import json; print(json.load(open('$OUT/devices.json'))['cuda_devices'])" 2>/dev/null || echo 0)
((REHEARSE)) && GPUS=2
if ((GPUS >= 2)); then
  # Buckets of 10 KB: the DP sums start on NCCL during the last backward (about 50 buckets a module).
  TWO="$TINY --set runtime.device=$DEVICE --set run.precision=fp32 --set runtime.grad_bucket_mib=0.01"
  if stage uniform_2 120 $HETPAR train $TWO --set layout.llm.dp=2 --out "$OUT/uniform_2"; then
    stage colocated_2 120 $HETPAR train $TWO --set layout.placement=colocated --set layout.encoder.dp=2 \
      --set layout.llm.tp=2 --out "$OUT/colocated_2" &&
      stage colocated_parity 30 $HETPAR compare "$OUT/colocated_2" "$OUT/uniform_2" --rtol 1e-5
    # Sequence parallelism on NCCL: the parts all-gathered and reduce-scattered, rows sent to their TP rank.
    stage colocated_2_sp 120 $HETPAR train $TWO --set layout.placement=colocated --set layout.encoder.dp=2 \
      --set layout.llm.tp=2 --set layout.llm.sp=true --out "$OUT/colocated_2_sp" &&
      stage colocated_sp_parity 30 $HETPAR compare "$OUT/colocated_2_sp" "$OUT/uniform_2" --rtol 1e-5
    stage uniform_2_sums_after 120 $HETPAR train $TWO --set layout.llm.dp=2 --set runtime.overlap_grad_reduce=false \
      --out "$OUT/uniform_2_sums_after" &&
      stage overlap_same_bits 30 $HETPAR compare "$OUT/uniform_2" "$OUT/uniform_2_sums_after" --rtol 0
    # The optimizer state sharded over the 2 ranks: reduce-scatter, update of half, all-gather on NCCL.
    stage uniform_2_sharded 120 $HETPAR train $TWO --set layout.llm.dp=2 --set optim.shard_state=true \
      --out "$OUT/uniform_2_sharded" &&
      stage sharded_parity 30 $HETPAR compare "$OUT/uniform_2_sharded" "$OUT/uniform_2" --rtol 1e-6
  fi
  stage noncolocated_2 120 $HETPAR train $TWO --set layout.placement=non-colocated --set layout.run_ahead=2 \
    --out "$OUT/noncolocated_2" &&
    stage noncolocated_parity 30 $HETPAR compare "$OUT/noncolocated_2" "$OUT/fp32_cuda" --rtol 1e-5
else
  skip multi_gpu "one GPU: NCCL refuses two ranks on one device, so the 2-rank NCCL parity cases need 2 GPUs"
fi
echo "gpu-check: done in $((SECONDS - T0)) s" >&2
"$PY" scripts/gpu_check_report.py "$OUT"
