#!/bin/bash
# Mixed-precision figures (docs/BENCHMARKS.md §11): troupe beside PyTorch, alternated, 3 runs each;
# then the 16-bit gradient reduction (--reduce-dtype) beside fp32.
# Needs /tmp/troupe (go build -o /tmp/troupe ./cmd/troupe) and the anchors beside the repository.
cd "$(dirname "$0")/../../shared/anchors" && source ./blas_env.sh >/dev/null 2>&1
OUT=${OUT:-/tmp/bench_mp.jsonl}; : > $OUT
for run in 1 2 3; do
  for T in 1 2; do
    echo "{\"run\":$run,\"T\":$T,\"what\":\"troupe-gemm-bf16\",\"r\":$(GOMAXPROCS=$T /tmp/troupe bench gemm --threads $T --dtype bf16 --json)}" >> $OUT
    echo "{\"run\":$run,\"T\":$T,\"what\":\"torch-gemm-bf16\",\"r\":$($PY gemm_py.py --lib torch --dtype bfloat16 --threads $T --n 1024 2>/dev/null | tail -1)}" >> $OUT
    echo "{\"run\":$run,\"T\":$T,\"what\":\"troupe-gemm-fp16\",\"r\":$(GOMAXPROCS=$T /tmp/troupe bench gemm --threads $T --dtype fp16 --json)}" >> $OUT
    for P in fp32 bf16; do
      echo "{\"run\":$run,\"T\":$T,\"what\":\"troupe-gpt-$P\",\"r\":$(/tmp/troupe bench train --steps 30 --warmup-steps 5 --worlds dp1 --threads $T --precision $P --json 2>/dev/null)}" >> $OUT
    done
    echo "{\"run\":$run,\"T\":$T,\"what\":\"torch-gpt-fp32\",\"r\":$($PY torch_gpt_tiny.py --threads $T 2>/dev/null | tail -1)}" >> $OUT
    echo "{\"run\":$run,\"T\":$T,\"what\":\"torch-gpt-bf16\",\"r\":$($PY torch_gpt_tiny.py --threads $T --autocast bf16 2>/dev/null | tail -1)}" >> $OUT
  done
done

# Gradients in 16 bits (--reduce-dtype): the all-reduce alone (8 M values: 32 MiB fp32, 16 MiB bf16)
# and the GPT across two worker processes.
for run in 1 2 3; do
  echo "{\"run\":$run,\"what\":\"allreduce-fp32\",\"r\":$(/tmp/troupe bench allreduce --ranks 2 --bytes 32MiB --transport tcp --dtype fp32 --json)}" >> $OUT
  echo "{\"run\":$run,\"what\":\"allreduce-bf16\",\"r\":$(/tmp/troupe bench allreduce --ranks 2 --bytes 16MiB --transport tcp --dtype bf16 --json)}" >> $OUT
  for R in fp32 bf16; do
    echo "{\"run\":$run,\"what\":\"troupe-gpt-procs2-reduce-$R\",\"r\":$(/tmp/troupe bench train --steps 30 --warmup-steps 5 --worlds procs2 --threads 1 --reduce-dtype $R --json 2>/dev/null)}" >> $OUT
  done
done
