#!/bin/bash
# Compute speed beside PyTorch (docs/BENCHMARKS.md §24): the GEMM 1024³ in fp32 and bf16, the
# default GPT in fp32 and bf16 (PyTorch: autocast), the GPT at d_model 512 in bf16, and
# `--worlds procs2` with default flags beside DDP (2 processes × 1 thread); 1 and 2 threads,
# troupe and PyTorch alternated, RUNS runs each. With $BASE set to an older troupe binary, its
# GEMMs run beside the new one's too (before and after on the same machine).
# With PARTS=gemm only the GEMMs run (DTYPES, default "fp32 bf16", picks their types).
# Needs $TROUPE (default /tmp/troupe; go build -o /tmp/troupe ./cmd/troupe) and the anchors
# beside the repository (../shared/anchors, Debian's python3-torch).
cd "$(dirname "$0")/../../shared/anchors" && source ./blas_env.sh >/dev/null 2>&1
OUT=${OUT:-/tmp/bench_speed.jsonl}; : > "$OUT"
TROUPE=${TROUPE:-/tmp/troupe}
RUNS=${RUNS:-3}
PARTS=${PARTS:-all}
DTYPES=${DTYPES:-fp32 bf16}
# The machine is shared: before each measurement wait (up to 10 minutes) until the CPUs were at
# least IDLE% idle over 3 s, and record the idle share seen.
IDLE=${IDLE:-85}
idle() { # percent idle over 3 s, from /proc/stat
  read -r _ a b c d e f g h _ < /proc/stat; t1=$((a+b+c+d+e+f+g+h)); i1=$((d+e)); sleep 3
  read -r _ a b c d e f g h _ < /proc/stat; t2=$((a+b+c+d+e+f+g+h)); i2=$((d+e))
  echo $(( 100 * (i2 - i1) / (t2 - t1) ))
}
wait_idle() {
  for _ in $(seq 200); do IDLE_SEEN=$(idle); [ "$IDLE_SEEN" -ge "$IDLE" ] && return; done
}
# rec WHAT T CMD...: one measurement, as a JSON line {run, T, what, idle_before, r}.
rec() {
  local what=$1 t=$2; shift 2
  wait_idle
  local r; r=$("$@" 2>/dev/null | tail -1)
  echo "{\"run\":$run,\"T\":$t,\"what\":\"$what\",\"idle_before\":$IDLE_SEEN,\"r\":${r:-null}}" >> "$OUT"
}
GPT="--data synthetic-tokens --steps 30 --warmup-steps 5 --worlds dp1 --json"
WIDE="--data synthetic-tokens:vocab=65 --d-model 512 --n-layers 2 --n-heads 8 --context 64 --batch 32 --clip 0 --steps 16 --warmup-steps 4 --worlds dp1 --json"
for run in $(seq "$RUNS"); do
  for T in 1 2; do
    for D in $DTYPES; do
      rec "troupe-gemm-$D" $T env GOMAXPROCS=$T "$TROUPE" bench gemm --threads $T --dtype $D --json
      [ -n "$BASE" ] && rec "base-gemm-$D" $T env GOMAXPROCS=$T "$BASE" bench gemm --threads $T --dtype $D --json
      PD=float32; [ $D = bf16 ] && PD=bfloat16
      rec "torch-gemm-$D" $T $PY gemm_py.py --lib torch --threads $T --n 1024 --dtype $PD
    done
    [ "$PARTS" = gemm ] && continue
    for P in fp32 bf16; do
      rec "troupe-gpt-$P" $T "$TROUPE" bench train $GPT --threads $T --precision $P
      A=none; [ $P = bf16 ] && A=bf16
      rec "torch-gpt-$P" $T $PY torch_gpt_tiny.py --threads $T --autocast $A
    done
    rec "troupe-gpt512-bf16" $T "$TROUPE" bench train $WIDE --threads $T --precision bf16
    rec "torch-gpt512-bf16" $T $PY torch_gpt_tiny.py --threads $T --autocast bf16 --d-model 512 --n-layers 2 --n-heads 8 --steps 16 --warmup 4
  done
  [ "$PARTS" = gemm ] && continue
  rec "troupe-gpt-procs2" 2 "$TROUPE" bench train --data synthetic-tokens --steps 30 --warmup-steps 5 --worlds procs2 --json
  rec "torch-ddp-gpt-procs2" 2 $PY torch_ddp_gpt.py --procs 2 --threads 1 --steps 30 --warmup 5
done
