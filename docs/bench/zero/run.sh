#!/usr/bin/env bash
# ZeRO benchmarks (docs/BENCHMARKS.md §10). Usage: run.sh TROUPE ANCHORS OUT.jsonl [part ...]
# parts: speed (default: all three), memory, budget.
#   speed:  the default GPT (d_model 128, 4 layers, 4 heads, context 64, batch 32, AdamW; the
#           anchors' torch_ddp_gpt.py shape), 30 steps of which 5 warm-up, one thread a worker:
#           plain data parallelism and ZeRO 1/2/3 on the same worlds, with PyTorch DDP and DDP +
#           ZeroRedundancyOptimizer beside them; ROUNDS rounds, the worlds alternated in each.
#   memory: per-rank weight, gradient and optimizer bytes at dp 1, 2, 4 and every ZeRO stage
#           (0.25 MiB buckets), beside troupe plan memory for the same parameter count.
#   budget: the largest GPT (12 layers, 4 heads, d_model on a ladder) whose model states at their
#           peak in the step fit BUDGET_MIB (default 32) per worker at dp 4, for every ZeRO stage.
set -euo pipefail
troupe=$1 anchors=$2 out=$3
shift 3
parts=${*:-speed memory budget}
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-3}
source "$anchors/blas_env.sh"
load() { cut -d' ' -f1 /proc/loadavg; }
for part in $parts; do
  case $part in
  speed)
    for r in $(seq "$rounds"); do
      for w in dp2 dp2xzero1 dp2xzero2 dp2xzero3 procs2 procs2xzero1 procs2xzero3 dp4 dp4xzero3; do
        echo "{\"part\": \"speed\", \"round\": $r, \"load1\": $(load), \"out\": $("$troupe" bench train --steps 30 --warmup-steps 5 --threads 1 --json --log-level warn --worlds "$w")}" >> "$out"
      done
      echo "{\"part\": \"speed\", \"round\": $r, \"torch\": \"ddp\", \"out\": $(cd "$anchors" && $PY torch_ddp_gpt.py --procs 2 --threads 1 --steps 30 --warmup 5)}" >> "$out"
      echo "{\"part\": \"speed\", \"round\": $r, \"torch\": \"ddp+ZeroRedundancyOptimizer\", \"out\": $(ANCHORS=$anchors $PY "$here/torch_zero_gpt.py" --procs 2 --threads 1 --steps 30 --warmup 5)}" >> "$out"
    done ;;
  memory)
    for d in 1 2 4; do
      for s in 0 1 2 3; do
        res=$("$troupe" bench train --steps 3 --warmup-steps 1 --threads 1 --bucket-mb 0.25 --json --log-level warn --worlds "dp${d}xzero$s")
        n=$(echo "$res" | jq '.results[0].params')
        plan=$("$troupe" plan memory --params "$n" --dp "$d" --zero "$s" --k 8 --weight-bytes 4 --grad-bytes 4 --json)
        echo "{\"part\": \"memory\", \"dp\": $d, \"zero\": $s, \"out\": $res, \"plan\": $plan}" >> "$out"
      done
    done ;;
  budget)
    for s in 0 1 2 3; do
      for dm in 96 128 160 192 224 256 288; do
        res=$("$troupe" bench train --n-layers 12 --d-model "$dm" --steps 3 --warmup-steps 1 --threads 1 --bucket-mb 0.25 --json --log-level warn --worlds "dp4xzero$s")
        echo "{\"part\": \"budget\", \"zero\": $s, \"d_model\": $dm, \"out\": $res}" >> "$out"
        peak=$(echo "$res" | jq '.results[0] | .peak_param_bytes + .peak_grad_bytes + .optimizer_bytes')
        [ "$peak" -gt $(( ${BUDGET_MIB:-32} << 20 )) ] && break
      done
    done ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
