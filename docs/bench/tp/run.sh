#!/usr/bin/env bash
# Tensor-parallel step time side by side with PyTorch (docs/BENCHMARKS.md §9).
# GPT d_model 512, 2 layers, 8 heads, context 64, batch 32, vocabulary 65
# (torch_gpt_tiny.py's shape at --d-model 512 --n-layers 2 --n-heads 8),
# AdamW, no clipping; 16 steps of which 4 warm-up. ROUNDS rounds, the
# worlds alternated in each. Usage: run.sh TROUPE ANCHORS OUT.jsonl
set -euo pipefail
troupe=$1 anchors=$2 out=$3
rounds=${ROUNDS:-3}
args=(--data synthetic-tokens:vocab=65 --d-model 512 --n-layers 2 --n-heads 8 --context 64 --batch 32
      --clip 0 --steps 16 --warmup-steps 4 --json --log-level warn)
source "$anchors/blas_env.sh"
for r in $(seq "$rounds"); do
  for w in "dp1 1" "tp2 2" "procs2xtp2 1" "dp1 2" "dp2 2"; do
    set -- $w
    echo "{\"round\": $r, \"troupe\": \"$1\", \"threads\": $2, \"load1\": $(cut -d' ' -f1 /proc/loadavg), \"out\": $("$troupe" bench train "${args[@]}" --worlds "$1" --threads "$2")}" >> "$out"
  done
  for t in 1 2; do
    echo "{\"round\": $r, \"torch_threads\": $t, \"out\": $(cd "$anchors" && $PY torch_gpt_tiny.py --threads $t --d-model 512 --n-layers 2 --n-heads 8 --steps 16 --warmup 4)}" >> "$out"
  done
done
