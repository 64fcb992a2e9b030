#!/usr/bin/env bash
# gpu-check.sh: the CUDA backend's checks on a GPU machine, in one bounded
# run (each stage has its own timeout; under 9 minutes in all). Run from the
# repository root after scripts/gpu-build.sh made bin/ (on a machine with
# Go; carry bin/ along). It prints a short table last.
#
#   1. the conformance suite and the GPU-vs-CPU tests on the GPU
#      (bin/cuda.test: kerneltest.Run against the float64 reference, model
#      shapes against the CPU backend, FP32 and TF32);
#   2. GEMM at 4096³ on the FP32, TF32, BF16 and FP16 paths, in TFLOP/s and
#      as a share of the H200's dense peaks on NVIDIA's spec sheet (67 FP32,
#      495 TF32, 989 BF16 and FP16 TFLOP/s);
#   3. per-kernel times of a small-GPT step (kerneltest.Bench);
#   4. the default GPT trained for 50 steps on the CPU and on the GPU (FP32),
#      same seed and data: per-step losses compared (they must agree within
#      LOSS_RTOL relative), and tokens/s of each; then the GPU with TF32;
#      then --precision bf16 on the CPU and the GPU (the same roundings,
#      fp32 sums in other orders: within LOSS_RTOL too).
#
# Results go to $OUT (the device tool's output folder) or gpu-check-out/.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
STEPS=${STEPS:-50}
# Relative loss agreement required between the CPU and the GPU (FP32) over
# the 50 steps: both compute in float32 with sums in different orders, a
# relative difference of about 1e-6 at step 1 that training may amplify
# somewhat, but nowhere near 1e-3 unless a kernel is wrong.
LOSS_RTOL=${LOSS_RTOL:-1e-3}
export GOROOT="$PWD/bin/goroot" # gospec data, see gpu-build.sh

for f in bin/cuda.test bin/troupe-cuda bin/goroot/doc/go_spec.html; do
	[ -e "$f" ] || { echo "gpu-check: $f missing: run scripts/gpu-build.sh first" >&2; exit 1; }
done

status=0
stage() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

stage "devices"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
timeout 60 bin/troupe-cuda devices | tee "$OUT/devices.txt"

stage "conformance and GPU-vs-CPU tests"
if timeout 240 bin/cuda.test -test.count=1 -test.timeout=230s >"$OUT/tests.txt" 2>&1; then
	tests="PASS"
else
	tests="FAIL"
	status=1
fi
grep -E "^(--- FAIL|FAIL|ok|PASS)|panic" "$OUT/tests.txt" | head -40
echo "tests: $tests (log: $OUT/tests.txt)"

stage "GEMM 4096^3"
timeout 120 bin/cuda.test -test.run '^$' -test.bench 'Gemm4096' -test.benchtime 20x >"$OUT/gemm.txt" 2>&1 || status=1
cat "$OUT/gemm.txt"
tflops() { awk -v p="Gemm4096/$1" '$1 ~ p { for (i = 1; i < NF; i++) if ($(i+1) == "TFLOP/s") print $i }' "$OUT/gemm.txt" | head -1; }
fp32=$(tflops fp32)
tf32=$(tflops tf32)
bf16=$(tflops bf16)
fp16=$(tflops fp16)

stage "kernels of a small-GPT step (kerneltest.Bench), FP32"
timeout 90 bin/cuda.test -test.run '^$' -test.bench 'Kernels' -test.benchtime 50x >"$OUT/kernels.txt" 2>&1 || status=1
grep -E "^Benchmark" "$OUT/kernels.txt" | awk '{ printf "%-60s %s %s\n", $1, $3, $4 }'

train() { # name device precision [env...]
	local name=$1 dev=$2 prec=$3
	shift 3
	env "$@" timeout 150 bin/troupe-cuda train --device "$dev" --precision "$prec" --steps "$STEPS" --seed 1 \
		--metrics-out "$OUT/train-$name.jsonl" >"$OUT/train-$name.log" 2>&1 || { echo "train $name failed:"; tail -5 "$OUT/train-$name.log"; status=1; }
}
# field FILE KEY: the KEY values of a metrics file, one a line.
field() { awk -v k="\"$2\":" '{ i = index($0, k); if (i) { s = substr($0, i + length(k)); sub(/[,}].*/, "", s); print s } }' "$1"; }
# median tokens/s over the steps after the first five (warm-up, JIT).
tokps() { field "$1" tokens_per_s | tail -n +6 | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f\n", v[int((NR + 1) / 2)]; else print "n/a" }'; }
# maxrel A B: the largest |lossA − lossB| / |lossB| over the steps.
maxrel() { paste <(field "$1" loss) <(field "$2" loss) | awk 'BEGIN { m = 0 } { d = $1 - $2; if (d < 0) d = -d; b = $2 < 0 ? -$2 : $2; if (b > 0 && d / b > m) m = d / b; n++ } END { if (n == 0) print "n/a"; else printf "%.2e\n", m }'; }

stage "GPT, $STEPS steps, CPU"
train cpu cpu fp32
stage "GPT, $STEPS steps, GPU (FP32)"
train cuda cuda fp32 TROUPE_CUDA_TF32=0
stage "GPT, $STEPS steps, GPU (TF32)"
train cuda-tf32 cuda fp32 TROUPE_CUDA_TF32=1
stage "GPT, $STEPS steps, CPU and GPU in bf16"
train cpu-bf16 cpu bf16
train cuda-bf16 cuda bf16

ncpu=$(field "$OUT/train-cpu.jsonl" loss 2>/dev/null | wc -l)
ngpu=$(field "$OUT/train-cuda.jsonl" loss 2>/dev/null | wc -l)
rel=$(maxrel "$OUT/train-cuda.jsonl" "$OUT/train-cpu.jsonl" 2>/dev/null)
reltf=$(maxrel "$OUT/train-cuda-tf32.jsonl" "$OUT/train-cpu.jsonl" 2>/dev/null)
lossok=$(awk -v r="$rel" -v t="$LOSS_RTOL" -v a="$ncpu" -v b="$ngpu" -v s="$STEPS" 'BEGIN { print (r != "n/a" && a == s && b == s && r + 0 <= t + 0) ? "PASS" : "FAIL" }')
[ "$lossok" = PASS ] || status=1
relbf=$(maxrel "$OUT/train-cuda-bf16.jsonl" "$OUT/train-cpu-bf16.jsonl" 2>/dev/null)
nbf=$(field "$OUT/train-cuda-bf16.jsonl" loss 2>/dev/null | wc -l)
bfok=$(awk -v r="$relbf" -v t="$LOSS_RTOL" -v b="$nbf" -v s="$STEPS" 'BEGIN { print (r != "n/a" && b == s && r + 0 <= t + 0) ? "PASS" : "FAIL" }')
[ "$bfok" = PASS ] || status=1
last() { field "$1" loss | tail -1 | awk '{ printf "%.4f\n", $1 }'; }

share() { awk -v v="$1" -v c="$2" 'BEGIN { if (v == "") print "n/a"; else printf "%.1f%%\n", 100 * v / c }'; }
stage "summary ($(date -u +%Y-%m-%d))"
{
	printf "%-34s %-14s %s\n" "check" "result" "reference"
	printf "%-34s %-14s %s\n" "conformance + GPU-vs-CPU tests" "$tests" "kerneltest float64 reference"
	printf "%-34s %-14s %s\n" "GEMM 4096^3 FP32 TFLOP/s" "${fp32:-n/a}" "$(share "$fp32" 67) of 67 (H200 FP32)"
	printf "%-34s %-14s %s\n" "GEMM 4096^3 TF32 TFLOP/s" "${tf32:-n/a}" "$(share "$tf32" 495) of 495 (H200 TF32 dense)"
	printf "%-34s %-14s %s\n" "GEMM 4096^3 BF16 TFLOP/s" "${bf16:-n/a}" "$(share "$bf16" 989) of 989 (H200 BF16 dense)"
	printf "%-34s %-14s %s\n" "GEMM 4096^3 FP16 TFLOP/s" "${fp16:-n/a}" "$(share "$fp16" 989) of 989 (H200 FP16 dense)"
	printf "%-34s %-14s %s\n" "GPT $STEPS steps: losses GPU vs CPU" "$lossok" "max rel diff $rel (tol $LOSS_RTOL); TF32 $reltf"
	printf "%-34s %-14s %s\n" "GPT final loss CPU / GPU" "$(last "$OUT/train-cpu.jsonl")" "$(last "$OUT/train-cuda.jsonl")"
	printf "%-34s %-14s %s\n" "GPT tokens/s CPU" "$(tokps "$OUT/train-cpu.jsonl")" "median of steps 6-$STEPS"
	printf "%-34s %-14s %s\n" "GPT tokens/s GPU FP32" "$(tokps "$OUT/train-cuda.jsonl")" ""
	printf "%-34s %-14s %s\n" "GPT tokens/s GPU TF32" "$(tokps "$OUT/train-cuda-tf32.jsonl")" ""
	printf "%-34s %-14s %s\n" "GPT bf16: losses GPU vs CPU" "$bfok" "max rel diff $relbf (tol $LOSS_RTOL)"
	printf "%-34s %-14s %s\n" "GPT tokens/s CPU bf16 / GPU bf16" "$(tokps "$OUT/train-cpu-bf16.jsonl")" "$(tokps "$OUT/train-cuda-bf16.jsonl")"
} | tee "$OUT/summary.txt"
exit $status
