#!/usr/bin/env bash
# The paper's figures by prediction (`make paper`): for each LLM x encoder
# of the paper's model family and each cluster size, `hetpar plan` on a
# GPU profile finds the best uniform, colocated and non-colocated layouts;
# plots/plot_paper.py draws their speedups against encoder size beside the
# paper's published results.
#   scripts/paper.sh HETPAR PYTHON OUT_DIR [PROFILE [SETTINGS [PLAN_FLAGS]]]
# SETTINGS: run-file settings for every plan, space-separated key=value
# (for example "optim.shard_state=true"); PLAN_FLAGS: hetpar plan flags for
# every plan (for example "--recompute-where-needed").
# The global batch grows with the cluster (8 samples of 4096 tokens a GPU),
# so every size keeps the same work per GPU.
set -euo pipefail
hetpar=$1 python=$2 out=$3
profile=${4:-profiles/h100_dgx.json}
settings=()
for setting in ${5:-}; do settings+=(--set "$setting"); done
plan_flags=()
for flag in ${6:-}; do plan_flags+=("$flag"); done
repo=$(cd "$(dirname "$0")/.." && pwd)
llms=(llama3_8b llama3_70b)
# InternViT-6B with 32 heads (workloads/encoders/vit_6b_h32.toml): with its own 25 no uniform
# baseline exists to compare with.
encoders=(vit_l14_336 siglip_so400m vit_6b_h32)
sizes=(8 16 32 64 128 256 512 1024)

# Only into a folder paper.sh made (its marker) or an empty or absent one:
# never over a user's files.
if [[ -e "$out" && ! -f "$out/.hetpar-paper" && -n "$(ls -A "$out" 2>/dev/null)" ]]; then
  echo "paper: $out is not empty and was not made by scripts/paper.sh (no .hetpar-paper marker); choose another folder (make paper PAPER=...)" >&2
  exit 2
fi
mkdir -p "$out/runs" "$out/plans"
touch "$out/.hetpar-paper"
plans=()
for llm in "${llms[@]}"; do
  for encoder in "${encoders[@]}"; do
    run="$out/runs/$llm+$encoder.toml"
    cat > "$run" <<TOML
# Written by scripts/paper.sh: $llm with $encoder, 1-3 images a sample.
include = ["$repo/workloads/llms/$llm.toml", "$repo/workloads/encoders/$encoder.toml"]
[run]
name = "$llm+$encoder"
precision = "bf16"
[data]
micro_batch_size = 1
images_min = 1
images_max = 3
TOML
    for n in "${sizes[@]}"; do
      dir="$out/plans/$llm+$encoder-$n"
      echo "== $llm + $encoder on $n GPUs"
      if "$hetpar" plan "$run" --devices "$n" --profile "$profile" --top 3 \
           --set data.global_batch_size=$((8 * n)) "${settings[@]}" "${plan_flags[@]}" --label llm="$llm" --label encoder="$encoder" \
           --out "$dir" > "$dir.txt" 2>&1; then
        plans+=("$dir/plan.json")
        sed -n '/^best of each/,/^$/p' "$dir.txt"
      else
        echo "   no plan: $(tail -n 3 "$dir.txt" | tr '\n' ' ')"
      fi
    done
  done
done
"$python" "$repo/plots/plot_paper.py" "$out" "${plans[@]}" | tee "$out/paper_speedups.md"
