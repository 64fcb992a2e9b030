#!/bin/bash
# Llama training throughput (docs/BENCHMARKS.md §22): troupe's default --model llama beside
# ../shared/anchors/torch_llama_tiny.py (the same model: vocabulary 65, d_model 128, 4 layers,
# 4 heads on 2 kv heads, SwiGLU 344, context 64, batch 32, AdamW lr 3e-4, no clipping, random
# tokens), fp32 and bf16 (PyTorch: autocast), 1 and 2 threads, alternated, RUNS runs each.
# Needs $TROUPE (default /tmp/troupe; go build -o /tmp/troupe ./cmd/troupe) and the anchors beside the repository.
cd "$(dirname "$0")/../../shared/anchors" && source ./blas_env.sh >/dev/null 2>&1
OUT=${OUT:-/tmp/bench_llama.jsonl}; : > $OUT
TROUPE=${TROUPE:-/tmp/troupe}
RUNS=${RUNS:-3}
# The machine is shared: before each measurement wait (up to 10 minutes) until the CPUs were at
# least IDLE% idle over 3 seconds, and record the idle share seen.
IDLE=${IDLE:-85}
idle() { # percent idle over 3 s, from /proc/stat
  read -r _ a b c d e f g h _ < /proc/stat; t1=$((a+b+c+d+e+f+g+h)); i1=$((d+e)); sleep 3
  read -r _ a b c d e f g h _ < /proc/stat; t2=$((a+b+c+d+e+f+g+h)); i2=$((d+e))
  echo $(( 100 * (i2 - i1) / (t2 - t1) ))
}
wait_idle() {
  for _ in $(seq 200); do IDLE_SEEN=$(idle); [ "$IDLE_SEEN" -ge "$IDLE" ] && return; done
}
for run in $(seq $RUNS); do
  for T in 1 2; do
    for P in fp32 bf16; do
      wait_idle
      echo "{\"run\":$run,\"T\":$T,\"what\":\"troupe-llama-$P\",\"idle_before\":$IDLE_SEEN,\"r\":$($TROUPE bench train --model llama \
        --data synthetic-tokens --batch 32 --context 64 --lr 3e-4 --clip 0 --steps 35 --warmup-steps 5 --worlds dp1 \
        --threads $T --precision $P --json 2>/dev/null)}" >> $OUT
      A=none; [ $P = bf16 ] && A=bf16
      wait_idle
      echo "{\"run\":$run,\"T\":$T,\"what\":\"torch-llama-$P\",\"idle_before\":$IDLE_SEEN,\"r\":$($PY torch_llama_tiny.py --threads $T --autocast $A 2>/dev/null | tail -1)}" >> $OUT
    done
  done
done
