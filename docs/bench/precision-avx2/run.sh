#!/bin/bash
# Alternated rounds (docs/BENCHMARKS.md §11, fourth run): troupe vs PyTorch, bf16 and fp32, GEMM and GPT.
TROUPE=$(realpath "${TROUPE:-/tmp/troupe}")
cd "${ANCHORS:-../shared/anchors}" && . ./blas_env.sh
OUT=/tmp/avx2bench.jsonl; : > $OUT
for r in 1 2; do
 for T in 1 2; do
  GOMAXPROCS=$T "$TROUPE" bench gemm --threads $T --dtype bf16 --json | sed "s/^/{\"who\":\"troupe\",\"round\":$r,\"T\":$T,\"x\":/; s/\$/}/" >> $OUT
  $PY gemm_py.py --lib torch --dtype bfloat16 --threads $T --n 1024 2>/dev/null | tail -1 | sed "s/^/{\"who\":\"torch\",\"round\":$r,\"T\":$T,\"x\":/; s/\$/}/" >> $OUT
  for P in bf16 fp32; do
   GOMAXPROCS=2 "$TROUPE" bench train --steps 30 --warmup-steps 5 --worlds dp1 --threads $T --precision $P --json | sed "s/^/{\"who\":\"troupe-gpt-$P\",\"round\":$r,\"T\":$T,\"x\":/; s/\$/}/" >> $OUT
  done
  $PY torch_gpt_tiny.py --threads $T --autocast bf16 2>/dev/null | tail -1 | sed "s/^/{\"who\":\"torch-gpt-bf16\",\"round\":$r,\"T\":$T,\"x\":/; s/\$/}/" >> $OUT
  $PY torch_gpt_tiny.py --threads $T 2>/dev/null | tail -1 | sed "s/^/{\"who\":\"torch-gpt-fp32\",\"round\":$r,\"T\":$T,\"x\":/; s/\$/}/" >> $OUT
 done
done
touch /tmp/avx2bench.done
