#!/usr/bin/env bash
# bench-all.sh: rerun every figure of docs/BENCHMARKS.md, troupe beside its
# anchor (PyTorch 1.13 on OpenBLAS-OpenMP, gloo, torchrun, gonum, iperf3, Go
# memcpy) in the same run, and print the tables.
#
#   scripts/bench-all.sh [OUTDIR] [GROUP ...]
#
# OUTDIR (default /tmp/troupe-bench) receives one JSON-lines file per group
# (OUTDIR/<group>.jsonl: every record carries group, side = troupe|anchor|
# gonum|ceiling, what, run, load1 = the 1-minute load average when it
# started, foreign_cpu = the share of the 2 cores used by other processes
# while it ran, and cmd), per-step metrics (OUTDIR/*-steps.jsonl), the raw
# logs (OUTDIR/log/) and summary.md. Records are appended: use a fresh OUTDIR
# for a fresh table. Groups, in order (times on the 2-core machine):
#
#   gemm      GEMM GFLOP/s, 512³/1024³/2048³ and the models' shapes, 1 and 2 threads   (~3.5 min)
#   train     single-worker GPT and MLP training throughput, 1 and 2 threads            (~2.5 min)
#   dp        data-parallel scaling: dp1, dp2 (in-process), procs2 beside DDP/gloo       (~2.5 min)
#   allreduce busbw, P = 2 and 4, local/tcp/actor beside gloo, iperf3, memcpy            (~3 min)
#   ckpt      checkpoint GB/s beside a plain write; async-save pause in a real run        (~1 min)
#   pipeline  --pp 2 vs --dp 2/1; measured bubble vs formula; --recompute memory          (~1 min)
#   elastic   kill -9 / SIGSTOP / join timings (e2e tests, 3 agents and torchrun killed,
#             the detection benchmark)                                                   (~4.5 min)
#   summary   median tables from the JSON lines (always run last when all groups run)
#
# No group argument runs them all. Environment: RUNS (repeats of each
# side-by-side pair, default 3), ANCHORS (the anchors folder, default
# ../shared/anchors beside the repository), TROUPE (a troupe binary; default
# built into OUTDIR). Run it on an otherwise idle machine: each group prints
# the load average first, and every measurement its foreign CPU share.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-/tmp/troupe-bench}
shift || true
GROUPS_RUN=("$@")
[ ${#GROUPS_RUN[@]} -eq 0 ] && GROUPS_RUN=(gemm train dp allreduce ckpt pipeline elastic summary)
RUNS=${RUNS:-3}
ANCHORS=${ANCHORS:-$(cd "$ROOT/../shared/anchors" 2>/dev/null && pwd || echo /work/shared/anchors)}
PY=/usr/bin/python3
mkdir -p "$OUT/log" "$OUT/tmp"

need() { command -v "$1" >/dev/null || { echo "bench-all: $1 is required ($2)" >&2; exit 1; }; }
need jq "apt-get install jq"
need go "Go 1.26"
[ -x "$PY" ] || { echo "bench-all: $PY is required (Debian's python3 with python3-torch)" >&2; exit 1; }
[ -f "$ANCHORS/blas_env.sh" ] || { echo "bench-all: anchors not found at $ANCHORS (set ANCHORS)" >&2; exit 1; }

if [ -z "${TROUPE:-}" ]; then
	TROUPE=$OUT/troupe
	(cd "$ROOT" && go build -o "$TROUPE" ./cmd/troupe)
fi
if [ ! -x /tmp/anchor_go/bin/memcpy ] || [ ! -x /tmp/anchor_go/bin/gemm ]; then
	(cd "$ANCHORS" && ./go_setup.sh >"$OUT/log/go_setup.txt" 2>&1)
fi

load1() { cut -d' ' -f1 /proc/loadavg; }
# Foreign CPU: the machine's busy time (/proc/stat, USER_HZ = 100) minus
# what this script's children used (bash's times), over wall × CPUs. The
# load average counts the benchmark itself; this does not.
busy_s() { awk '/^cpu /{printf "%.2f", ($2+$3+$4+$7+$8+$9)/100}' /proc/stat; }
# child_cpu sets CHILD: times must run in this shell, not in a $(…) subshell.
child_cpu() {
	times >"$OUT/tmp/times"
	CHILD=$(tail -1 "$OUT/tmp/times" | awk '{s=0; for(i=1;i<=2;i++){split($i,a,"m"); s+=a[1]*60+substr(a[2],1,length(a[2])-1)} printf "%.3f", s}')
}
now_s() { date +%s.%N; }
foreign() { awk -v b0="$1" -v b1="$2" -v c0="$3" -v c1="$4" -v t0="$5" -v t1="$6" -v n="$(nproc)" \
	'BEGIN{f=((b1-b0)-(c1-c0))/((t1-t0)*n); if(f<0)f=0; printf "%.3f", f}'; }
banner() { echo; echo "== $1 ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"; }

# rec GROUP SIDE WHAT RUN CMD...: run CMD, keep its stderr in the group's
# log, and append each JSON line of its stdout to OUT/GROUP.jsonl with the
# tags. A JSON object holding a "results" array (bench train) becomes one
# line per result.
rec() {
	local g=$1 side=$2 what=$3 run=$4
	shift 4
	local l0 tmp=$OUT/tmp/rec.out b0 c0 t0 fr
	l0=$(load1)
	echo -n "  [$side] $what run $run (load $l0): $*"
	child_cpu
	b0=$(busy_s) c0=$CHILD t0=$(now_s)
	"$@" >"$tmp" 2>>"$OUT/log/$g.log" || { local rc=$?; echo; echo "    FAILED (exit $rc); see $OUT/log/$g.log" >&2; return 0; }
	child_cpu
	fr=$(foreign "$b0" "$(busy_s)" "$c0" "$CHILD" "$t0" "$(now_s)")
	echo " [foreign CPU $fr]"
	grep '^{' "$tmp" | jq -c --arg g "$g" --arg s "$side" --arg w "$what" --argjson r "$run" \
		--argjson l "$l0" --argjson fr "$fr" --arg c "$*" '
		(if has("results") then . as $top | .results[] + {model: $top.model, batch: $top.batch} else . end)
		+ {group: $g, side: $s, what: $w, run: $r, load1: $l, foreign_cpu: $fr, cmd: $c}' >>"$OUT/$g.jsonl" || true
}

# anchor CMD...: run CMD in the anchors folder with torch pinned to
# OpenBLAS's OpenMP build (blas_env.sh; $PY in CMD is Debian's python3).
anchor() { (cd "$ANCHORS" && BLAS=omp . ./blas_env.sh && "$@"); }

# gobench GROUP SIDE WHAT RUN TESTBIN ARGS...: run a compiled test binary's
# benchmarks and store one JSON line per result (name, ns/op and every
# custom metric), plus the -v log lines in the group's log.
gobench() {
	local g=$1 side=$2 what=$3 run=$4 bin=$5
	shift 5
	local l0 tmp=$OUT/tmp/gobench.out b0 c0 t0 fr
	l0=$(load1)
	echo -n "  [$side] $what run $run (load $l0): $(basename "$bin") $*"
	child_cpu
	b0=$(busy_s) c0=$CHILD t0=$(now_s)
	"$bin" "$@" >"$tmp" 2>&1 || echo " FAILED; see $OUT/log/$g.log" >&2
	child_cpu
	fr=$(foreign "$b0" "$(busy_s)" "$c0" "$CHILD" "$t0" "$(now_s)")
	echo " [foreign CPU $fr]"
	cat "$tmp" >>"$OUT/log/$g.log"
	$PY - "$tmp" "$g" "$side" "$what" "$run" "$l0" "$fr" "$(basename "$bin") $*" >>"$OUT/$g.jsonl" <<'EOF'
import json, re, sys
path, g, side, what, run, l0, fr, cmd = sys.argv[1:]
for line in open(path):
    m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(.*)$", line.strip())
    if not m:
        continue
    rec = {"bench": "go", "name": m.group(1), "n": int(m.group(3))}
    toks = m.group(4).split()
    for v, unit in zip(toks[0::2], toks[1::2]):
        rec[unit.replace("/", "_per_")] = float(v)
    rec.update(group=g, side=side, what=what, run=int(run), load1=float(l0), foreign_cpu=float(fr), cmd=cmd)
    print(json.dumps(rec))
EOF
}

group_gemm() {
	banner "1. GEMM GFLOP/s: troupe bench gemm beside torch.matmul (OpenBLAS) and gonum"
	(cd "$ROOT" && go test -c -o "$OUT/tmp/cpu.test" ./kernels/cpu)
	cat >"$OUT/tmp/torch_shapes.py" <<'EOF'
# torch.matmul at the shapes of BenchmarkGemm's model cases, timed as
# gemm_py.py times squares: one warm-up, 5 samples of >= 0.3 s, median.
import argparse, os, sys, time
sys.path.insert(0, os.getcwd())  # run from the anchors folder: its common.py
from common import set_threads, emit, med
ap = argparse.ArgumentParser(); ap.add_argument("--threads", type=int, required=True); a = ap.parse_args()
set_threads(a.threads)
import torch
torch.set_num_threads(a.threads)
# name, batch, M, N, K, transA, transB (as kernels/cpu/gemm_bench_test.go)
shapes = [("gpt_qkv_2048x384x128", 1, 2048, 384, 128, False, False),
          ("mlp_fwd_NT_256x1024x784", 1, 256, 1024, 784, False, True),
          ("mlp_dW_TN_1024x784x256", 1, 1024, 784, 256, True, False),
          ("attn_qk_NT_b128_64x64x32", 128, 64, 64, 32, False, True),
          ("attn_pv_b128_64x32x64", 128, 64, 32, 64, False, False)]
for name, b, m, n, k, ta, tb in shapes:
    A = torch.rand(b, k, m) if ta else torch.rand(b, m, k)
    B = torch.rand(b, n, k) if tb else torch.rand(b, k, n)
    A = A.transpose(1, 2) if ta else A
    B = B.transpose(1, 2) if tb else B
    if b == 1:
        A, B = A[0], B[0]
    C = torch.matmul(A, B)
    f = lambda: torch.matmul(A, B, out=C)
    f()
    gf, calls = [], 1
    t0 = time.perf_counter(); f(); dt = time.perf_counter() - t0
    calls = max(1, int(0.3 / max(dt, 1e-7)))
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        gf.append(2.0 * b * m * n * k * calls / (time.perf_counter() - t0) / 1e9)
    emit({"bench": "gemm_shape", "lib": "torch", "threads": a.threads, "shape": name, "gflops_med": med(gf), "gflops": gf})
EOF
	for run in $(seq "$RUNS"); do
		for n in 512 1024 2048; do
			for t in 1 2; do
				rec gemm troupe "gemm ${n}^3 t$t" "$run" env GOMAXPROCS=$t "$TROUPE" bench gemm --threads $t --m $n --n $n --k $n --json
				rec gemm anchor "gemm ${n}^3 t$t" "$run" anchor $PY gemm_py.py --lib torch --threads $t --n $n
			done
		done
	done
	for t in 1 2; do
		rec gemm gonum "gemm 1024^3 t$t" 1 env GOMAXPROCS=$t /tmp/anchor_go/bin/gemm -impl gonum -n 1024 -samples 3
	done
	# The models' shapes: troupe's BenchmarkGemm (t1 and t2 = GOMAXPROCS),
	# torch.matmul at the same shapes.
	for run in $(seq "$RUNS"); do
		gobench gemm troupe "gemm model shapes" "$run" "$OUT/tmp/cpu.test" -test.run XXX \
			-test.bench 'Gemm/(gpt|mlp|attn)' -test.benchtime 0.5s
		for t in 1 2; do
			rec gemm anchor "gemm model shapes t$t" "$run" anchor $PY "$OUT/tmp/torch_shapes.py" --threads $t
		done
	done
}

MLP_FLAGS=(--model mlp --layers 784,1024,1024,10 --data synthetic-mlp --batch 256 --optimizer sgd --lr 0.01
	--momentum 0.9 --lr-schedule constant --steps 60 --warmup-steps 10)
GPT_FLAGS=(--steps 30 --warmup-steps 5)

group_train() {
	banner "2. Single-worker training throughput: troupe bench train beside PyTorch (same MLP, same GPT shape)"
	for run in $(seq "$RUNS"); do
		for t in 1 2; do
			rec train troupe "gpt t$t" "$run" "$TROUPE" bench train "${GPT_FLAGS[@]}" --worlds dp1 --threads $t --json
			rec train anchor "gpt t$t" "$run" anchor $PY torch_gpt_tiny.py --threads $t
			rec train troupe "mlp t$t" "$run" "$TROUPE" bench train "${MLP_FLAGS[@]}" --worlds dp1 --threads $t --json
			rec train anchor "mlp t$t" "$run" anchor $PY torch_ddp_mlp.py --procs 1 --threads $t
		done
	done
}

group_dp() {
	banner "3. Data-parallel scaling, one thread per worker: dp1, dp2, procs2 beside DDP (gloo) P=1, P=2"
	for run in $(seq "$RUNS"); do
		rec dp troupe "mlp dp" "$run" "$TROUPE" bench train "${MLP_FLAGS[@]}" --worlds dp1,dp2,procs2 --threads 1 --json
		rec dp anchor "mlp ddp P=1" "$run" anchor $PY torch_ddp_mlp.py --procs 1 --threads 1
		rec dp anchor "mlp ddp P=2" "$run" timeout 300 bash -c "cd '$ANCHORS' && BLAS=omp . ./blas_env.sh && \$PY torch_ddp_mlp.py --procs 2 --threads 1"
		rec dp troupe "gpt dp" "$run" "$TROUPE" bench train "${GPT_FLAGS[@]}" --worlds dp1,dp2,procs2 --threads 1 --json
	done
}

group_allreduce() {
	banner "4. All-reduce busbw: troupe local/tcp/actor beside gloo, loopback TCP and memcpy"
	local sizes=1MiB,16MiB,64MiB,256MiB
	for run in $(seq 2); do
		for p in 2 4; do
			rec allreduce anchor "gloo P=$p" "$run" timeout 600 bash -c "cd '$ANCHORS' && BLAS=omp . ./blas_env.sh && \$PY torch_allreduce.py --procs $p --sizes-mib 1,16,64,256"
			rec allreduce troupe "tcp P=$p" "$run" "$TROUPE" bench allreduce --ranks $p --bytes $sizes --transport tcp --json
			rec allreduce troupe "local P=$p" "$run" "$TROUPE" bench allreduce --ranks $p --bytes $sizes --transport local --json
		done
	done
	for p in 2 4; do
		rec allreduce troupe "actor P=$p" 1 "$TROUPE" bench allreduce --ranks $p --bytes $sizes --transport actor --iters 5 --warmup 1 --json
	done
	for run in 1 2 3; do
		rec allreduce ceiling "iperf3 1 stream" "$run" anchor env PORT=5399 ./iperf_loopback.sh 1 3
	done
	rec allreduce ceiling "memcpy 1 goroutine" 1 /tmp/anchor_go/bin/memcpy -workers 1
	rec allreduce ceiling "memcpy 2 goroutines" 1 /tmp/anchor_go/bin/memcpy -workers 2
}

group_ckpt() {
	banner "5. Checkpoints: write GB/s beside a plain sequential write; async-save pause in troupe train"
	(cd "$ROOT" && go test -c -o "$OUT/tmp/checkpoint.test" ./checkpoint)
	gobench ckpt troupe "checkpoint benchmarks (disk: $OUT/tmp)" 1 env TROUPE_BENCH_DIR="$OUT/tmp" "$OUT/tmp/checkpoint.test" \
		-test.run XXX -test.bench 'Save|GPTCheckpoint' -test.benchtime 9x -test.v
	for run in 1 2; do
		rm -rf "$OUT/tmp/ck"
		rec ckpt troupe "train gpt ckpt-every 5" "$run" "$TROUPE" train --steps 40 --ckpt-dir "$OUT/tmp/ck" --ckpt-every 5 \
			--metrics-out "$OUT/tmp/ck-$run.jsonl" --json
		jq -c --argjson r "$run" '. + {group: "ckpt", side: "troupe", what: "train gpt ckpt-every 5 steps", run: $r}' \
			"$OUT/tmp/ck-$run.jsonl" >>"$OUT/ckpt-steps.jsonl"
	done
	rm -rf "$OUT/tmp/ck"
}

group_pipeline() {
	banner "6. Pipeline: --pp 2 beside --dp 2 and --dp 1 (GPT); measured bubble vs (P-1)/(M+P-1); --recompute"
	for run in $(seq "$RUNS"); do
		rec pipeline troupe "gpt dp" "$run" "$TROUPE" bench train --steps 20 --warmup-steps 4 --worlds dp1,dp2 --threads 2 --json
		rec pipeline troupe "gpt pp2 m4" "$run" "$TROUPE" bench train --steps 20 --warmup-steps 4 --pp 2 --micro-batches 4 --worlds dp1 --threads 2 --json
	done
	# Equal stages: four 512x512 layers, two per stage, one thread each.
	for sched in gpipe 1f1b; do
		for m in 1 4 8 32; do
			local f=$OUT/tmp/pp-$sched-$m.jsonl
			rec pipeline troupe "bubble $sched M=$m" 1 "$TROUPE" train --model mlp --layers 512,512,512,512,512 \
				--data synthetic-mlp:features=512,classes=512 --batch 256 --pp 2 --stage-layers 2,2 --threads 2 \
				--micro-batches $m --schedule $sched --steps 12 --lr-schedule constant --metrics-out "$f" --json
			jq -c --arg s "$sched" --argjson m "$m" '. + {group: "pipeline", side: "troupe", what: "bubble", schedule: $s, M: $m}' \
				"$f" >>"$OUT/pipeline-steps.jsonl"
		done
	done
	for rc in "" --recompute; do
		local f=$OUT/tmp/pp-gpt${rc}.jsonl
		rec pipeline troupe "gpt pp2 m4 ${rc:-no-recompute}" 1 "$TROUPE" train --pp 2 --micro-batches 4 --threads 2 --steps 8 $rc \
			--metrics-out "$f" --json
		jq -c --arg r "${rc:-none}" '. + {group: "pipeline", side: "troupe", what: "recompute", recompute: $r}' \
			"$f" >>"$OUT/pipeline-steps.jsonl"
	done
}

# elastic_kill RUN: three agents on loopback; kill -9 one mid-run; read the
# survivors' JSON logs for abort, re-formed world and resumed training.
elastic_kill() {
	local run=$1 dir=$OUT/tmp/agents-$1 ports pids=() i
	rm -rf "$dir" && mkdir -p "$dir"
	ports=$($PY -c 'import socket
ss=[socket.socket() for _ in range(3)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in ss))')
	IFS=, read -r -a addr <<<"$ports"
	# Each agent starts from a $(…) subshell, so that this shell does not
	# reap it (no "Killed" job notice); the end polls with kill -0.
	for i in 1 2 3; do
		pids+=("$("$TROUPE" agent --name n$i --listen "${addr[$((i - 1))]}" --join "$ports" --min-nodes 2 \
			--key passphrase:bench-all-cluster-key --log-format json --metrics-out "$dir/n$i.jsonl" \
			--model mlp --layers 784,64,10 --data synthetic-mlp --batch 48 --steps 3000 --log-every 250 --threads 1 \
			>"$dir/n$i.out" 2>"$dir/n$i.log" </dev/null & echo $!)")
	done
	local ok=0
	for _ in $(seq 1800); do
		if cat "$dir"/n*.jsonl 2>/dev/null | jq -e 'select(.world == 3 and .step >= 300)' >/dev/null 2>&1; then ok=1; break; fi
		sleep 0.05
	done
	if [ $ok = 1 ]; then
		local t0
		t0=$(date +%s.%N)
		kill -9 "${pids[1]}"
		echo "  kill -9 of n2 at $t0"
		for _ in $(seq 600); do
			cat "$dir"/n*.jsonl 2>/dev/null | jq -e 'select(.world == 2)' >/dev/null 2>&1 && break
			sleep 0.05
		done
		sleep 1
		echo "$t0" >"$dir/killed_at"
	else
		echo "  the 3-agent world did not reach step 300 in 90 s; see $dir" >&2
	fi
	for i in 0 2; do kill "${pids[$i]}" 2>/dev/null || true; done
	for _ in $(seq 200); do
		kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[2]}" 2>/dev/null || break
		sleep 0.05
	done
	for i in 0 1 2; do kill -9 "${pids[$i]}" 2>/dev/null || true; done
	[ $ok = 1 ] || return 0
	$PY - "$dir" "$run" "$(load1)" >>"$OUT/elastic.jsonl" <<'EOF'
import datetime, glob, json, os, sys
d, run, l0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = float(open(os.path.join(d, "killed_at")).read())
def ts(v):
    return datetime.datetime.strptime(v, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
first = {}
for name in ("n1", "n3"):
    for line in open(os.path.join(d, name + ".log")):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        t = ts(r["ts"]) if isinstance(r.get("ts"), str) else float(r.get("ts", 0))
        if t < t0 - 0.002:
            continue
        msg = r.get("msg", "")
        for key, pfx in (("member_lost", "member lost"), ("abort", "aborting the step in flight"),
                         ("generation_failed", "generation failed"), ("formed", "generation formed"),
                         ("resumed", "training resumed")):
            if msg.startswith(pfx) and key not in first:
                first[key] = (t - t0) * 1000
steps = []
for f in glob.glob(os.path.join(d, "n*.jsonl")):
    for line in open(f):
        try:
            steps.append(json.loads(line))
        except ValueError:
            pass
steps.sort(key=lambda r: r["step"])
last3 = max((r["step"] for r in steps if r["world"] == 3), default=None)
first2 = next((r for r in steps if r["world"] == 2), None)
rec = {"bench": "elastic_kill", "group": "elastic", "side": "troupe", "what": "kill -9 of 1 of 3 agents",
       "run": run, "load1": l0, "cmd": "scripts/bench-all.sh elastic (3 troupe agents, kill -9 n2)",
       "ms_to": {k: round(v, 1) for k, v in first.items()},
       "last_step_world3": last3, "first_step_world2": first2["step"] if first2 else None,
       "resume_ms": first2.get("resume_ms") if first2 else None,
       "steps_logged_twice": len(steps) - len({r["step"] for r in steps})}
print(json.dumps(rec))
EOF
}

# torchrun_kill RUN: the anchor of elastic_kill. PyTorch's elastic launcher
# (torchrun --standalone, 3 workers, DDP over gloo, the same MLP, global
# batch 48; --max_restarts 3, --monitor_interval left at its default) with a
# checkpoint every 100 steps, as torchrun expects of a training script; kill
# -9 of one worker mid-run; the workers' own log lines give the times.
torchrun_kill() {
	local run=$1 dir=$OUT/tmp/torchrun-$1 pid
	rm -rf "$dir" && mkdir -p "$dir"
	cat >"$dir/worker.py" <<'PYEOF'
import json, os, sys, time
sys.path.insert(0, os.getcwd())  # the anchors folder: common.py
from common import set_threads
set_threads(1)
import torch, torch.distributed as dist, torch.nn as nn
log, ckpt = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
f = open(log, "a")
def emit(**kw):
    f.write(json.dumps(dict(t=time.time(), rank=rank, restart=restart, pid=os.getpid(), **kw)) + "\n"); f.flush()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step = 0
if os.path.exists(ckpt):
    st = torch.load(ckpt)
    model.load_state_dict(st["model"]); opt.load_state_dict(st["opt"]); step = st["step"]
ddp = nn.parallel.DistributedDataParallel(model)
g = torch.Generator().manual_seed(1)
X, Y = torch.randn(4096, 784, generator=g), torch.randint(0, 10, (4096,), generator=g)
B, lossf = 48 // world, nn.CrossEntropyLoss()
emit(ev="start", step=step)
while step < 3000:
    i = (step * 48 + rank * B) % (4096 - B)
    opt.zero_grad(); lossf(ddp(X[i:i + B]), Y[i:i + B]).backward(); opt.step(); step += 1
    if rank == 0 and step % 100 == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    emit(ev="step", step=step)
dist.barrier()
os._exit(0)
PYEOF
	# (--redirects 1 --tee 2: torch 1.13's parsing of 0 and 3 fails on Python 3.11.)
	pid=$(cd "$ANCHORS" && BLAS=omp . ./blas_env.sh && {
		$PY -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node 3 --max_restarts 3 --redirects 1 --tee 2 \
			--log_dir "$dir/logs" "$dir/worker.py" "$dir/steps.jsonl" "$dir/ckpt.pt" >"$dir/torchrun.log" 2>&1 </dev/null &
		echo $!
	})
	local victim="" ok=0
	for _ in $(seq 1200); do
		victim=$(jq -r 'select(.ev == "step" and .rank == 1 and .step >= 300) | .pid' "$dir/steps.jsonl" 2>/dev/null | head -1 || true)
		[ -n "$victim" ] && { ok=1; break; }
		sleep 0.05
	done
	if [ $ok = 1 ]; then
		date +%s.%N >"$dir/killed_at"
		kill -9 "$victim"
		echo "  kill -9 of torchrun's rank 1 (pid $victim) at $(cat "$dir/killed_at")"
		for _ in $(seq 1200); do
			jq -e 'select(.ev == "step" and .restart == 1)' "$dir/steps.jsonl" >/dev/null 2>&1 && break
			sleep 0.05
		done
	else
		echo "  torchrun did not reach step 300 in 60 s; see $dir" >&2
	fi
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	kill -9 "$pid" 2>/dev/null || true
	# Workers torchrun left behind, by the pids they logged (only if still ours).
	for w in $(jq -r .pid "$dir/steps.jsonl" 2>/dev/null | sort -u); do
		grep -qs "$dir/worker.py" "/proc/$w/cmdline" && kill -9 "$w" 2>/dev/null || true
	done
	[ $ok = 1 ] || return 0
	$PY - "$dir" "$run" "$(load1)" >>"$OUT/elastic.jsonl" <<'PYEOF'
import json, os, sys
d, run, l0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = float(open(os.path.join(d, "killed_at")).read())
L = [json.loads(l) for l in open(os.path.join(d, "steps.jsonl")) if l.startswith("{")]
before = max(r["step"] for r in L if r["ev"] == "step" and r["restart"] == 0)
starts = [r for r in L if r["ev"] == "start" and r["restart"] == 1]
steps1 = [r for r in L if r["ev"] == "step" and r["restart"] == 1]
rec = {"bench": "torchrun_kill", "group": "elastic", "side": "anchor", "what": "torchrun: kill -9 of 1 of 3 workers",
       "run": run, "load1": l0, "cmd": "scripts/bench-all.sh elastic (torchrun --standalone --nproc_per_node 3 --max_restarts 3, kill -9 rank 1)",
       "ms_to_workers_restarted": round((min(r["t"] for r in starts) - t0) * 1000) if starts else None,
       "ms_to_first_step": round((min(r["t"] for r in steps1) - t0) * 1000) if steps1 else None,
       "last_step_before_kill": before, "resumed_from_step": min(r["step"] for r in starts) if starts else None}
rec["steps_lost"] = before - rec["resumed_from_step"] if starts else None
print(json.dumps(rec))
PYEOF
}

group_elastic() {
	banner "7. Elastic: kill -9 -> abort -> resumed; SIGSTOP -> dropped; join -> contributing; detection"
	(cd "$ROOT" && go test -c -o "$OUT/tmp/elastic.test" ./elastic)
	for run in 1 2; do
		local l0 tmp=$OUT/tmp/e2e.out
		l0=$(load1)
		echo "  [troupe] e2e Elastic tests run $run (load $l0): go test ./e2e -run Elastic -v -count=1"
		(cd "$ROOT" && go test ./e2e -run Elastic -v -count=1 -timeout 15m) >"$tmp" 2>&1 || echo "    e2e FAILED; see $OUT/log/elastic.log" >&2
		cat "$tmp" >>"$OUT/log/elastic.log"
		$PY - "$tmp" "$run" "$l0" >>"$OUT/elastic.jsonl" <<'EOF'
import json, re, sys
path, run, l0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
test = None
pats = {"join_to_contributing_s": r"n4 started; a world of 4 completed step \d+ ([\d.]+) s later \(resume (\d+) ms",
        "sigterm_to_world2_ms": r"SIGTERM to n3; a world of 2 completed step \d+ (\d+) ms later",
        "kill_to_world2_ms": r"kill -9 of n2; a world of 2 completed step \d+ (\d+) ms later \(resume (\d+) ms",
        "sigstop_to_world2_ms": r"SIGSTOP of n2; a world of 2 completed step \d+ (\d+) ms later",
        "leader_kill_to_world2_ms": r"kill -9 of the leader n1; n2 led a world of 2 to step \d+ (\d+) ms later"}
out = {"bench": "e2e_elastic", "group": "elastic", "side": "troupe", "what": "e2e Elastic tests", "run": run,
       "load1": l0, "cmd": "go test ./e2e -run Elastic -v -count=1", "results": {}}
for line in open(path):
    m = re.match(r"^--- (PASS|FAIL): (\S+) \(([\d.]+)s\)", line.strip())
    if m:
        out["results"][m.group(2)] = m.group(1)
    for k, p in pats.items():
        m = re.search(p, line)
        if m:
            out[k] = float(m.group(1))
            if m.lastindex and m.lastindex > 1:
                out[k.rsplit("_", 1)[0] + "_resume_ms"] = float(m.group(2))
print(json.dumps(out))
EOF
	done
	for run in 1 2; do
		echo "  [troupe] 3 agents, kill -9 of one, run $run (load $(load1))"
		elastic_kill "$run"
		echo "  [anchor] torchrun, 3 workers, kill -9 of one, run $run (load $(load1))"
		torchrun_kill "$run"
	done
	gobench elastic troupe "detection benchmark" 1 "$OUT/tmp/elastic.test" -test.run XXX -test.bench Detection -test.benchtime 10x -test.v
}

group_summary() {
	banner "Summary (medians over runs) -> $OUT/summary.md"
	$PY - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import glob, json, os, statistics as st, sys
out = sys.argv[1]
R = []
for f in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    for line in open(f):
        try:
            R.append(json.loads(line))
        except ValueError:
            pass
def med(xs):
    xs = [x for x in xs if x is not None]
    return st.median(xs) if xs else None
def rng(xs):
    xs = [x for x in xs if x is not None]
    return f"{min(xs):.4g}–{max(xs):.4g}" if xs else "–"
def f(x, d=3):
    return "–" if x is None else f"{x:.{d}g}"
def sel(**kw):
    return [r for r in R if all(r.get(k) == v for k, v in kw.items())]
def loads(rs):
    ls = [r["load1"] for r in rs if "load1" in r]
    fc = [r["foreign_cpu"] for r in rs if "foreign_cpu" in r]
    s = f"{min(ls):.2f}–{max(ls):.2f}" if ls else "–"
    return s + (f", foreign ≤{max(fc):.0%}" if fc else "")

print("# bench-all summary\n")
g = sel(group="gemm")
if g:
    print("## 1. GEMM GFLOP/s (median of per-run medians; range over runs)\n")
    print("| shape | threads | troupe | torch (OpenBLAS) | troupe/torch | gonum | load |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for n in (512, 1024, 2048):
        for t in (1, 2):
            w = f"gemm {n}^3 t{t}"
            tr = [r["gflops"] for r in sel(group="gemm", side="troupe", what=w)]
            an = [med(r["gflops"]) for r in sel(group="gemm", side="anchor", what=w)]
            go = [med(r["gflops"]) for r in sel(group="gemm", side="gonum", what=w)]
            rat = med(tr) / med(an) if tr and an else None
            print(f"| {n}³ | {t} | {f(med(tr))} ({rng(tr)}) | {f(med(an))} ({rng(an)}) | {f(rat, 2)} | {f(med(go))} | {loads(sel(group='gemm', what=w))} |")
    shapes = ["gpt_qkv_2048x384x128", "mlp_fwd_NT_256x1024x784", "mlp_dW_TN_1024x784x256", "attn_qk_NT_b128_64x64x32", "attn_pv_b128_64x32x64"]
    print("\n| model shape | threads | troupe (BenchmarkGemm) | torch.matmul | troupe/torch |")
    print("|---|---:|---:|---:|---:|")
    for s in shapes:
        for t in (1, 2):
            tr = [r.get("GFLOP_per_s") for r in sel(group="gemm", side="troupe", what="gemm model shapes") if r["name"] == f"BenchmarkGemm/{s}/t{t}"]
            an = [r["gflops_med"] for r in sel(group="gemm", side="anchor", what=f"gemm model shapes t{t}") if r["shape"] == s]
            rat = med(tr) / med(an) if tr and an else None
            print(f"| {s} | {t} | {f(med(tr))} ({rng(tr)}) | {f(med(an))} ({rng(an)}) | {f(rat, 2)} |")
    print()

g = sel(group="train")
if g:
    print("## 2. Single-worker training (median over runs)\n")
    print("| model | threads | troupe samples/s | torch samples/s | troupe/torch | troupe step ms | torch step ms | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for m in ("gpt", "mlp"):
        for t in (1, 2):
            w = f"{m} t{t}"
            tr = sel(group="train", side="troupe", what=w)
            an = sel(group="train", side="anchor", what=w)
            ts = [r["samples_per_s"] for r in tr]
            as_ = [r["tokens_s"] / 64 if m == "gpt" else r["samples_s"] for r in an]
            tm = [r["step_ms_median"] for r in tr]
            am = [r["step_med_ms"] for r in an]
            rat = med(ts) / med(as_) if ts and as_ else None
            print(f"| {m} | {t} | {f(med(ts), 4)} ({rng(ts)}) | {f(med(as_), 4)} ({rng(as_)}) | {f(rat, 2)} | {f(med(tm))} | {f(med(am))} | {loads(tr + an)} |")
    print("\n(GPT: samples of 64 tokens; torch_gpt_tiny's tokens/s ÷ 64.)\n")

g = sel(group="dp")
if g:
    print("## 3. Data-parallel scaling, 1 thread per worker (median over runs)\n")
    print("| model | world | troupe samples/s | efficiency | PyTorch | PyTorch samples/s | efficiency |")
    print("|---|---|---:|---:|---|---:|---:|")
    for m in ("mlp", "gpt"):
        tr = sel(group="dp", side="troupe", what=f"{m} dp")
        one = med([r["samples_per_s"] for r in tr if r["world"] == "dp1"])
        A1 = [r["samples_s"] for r in sel(group="dp", side="anchor", what="mlp ddp P=1")] if m == "mlp" else []
        A2 = [r["samples_s"] for r in sel(group="dp", side="anchor", what="mlp ddp P=2")] if m == "mlp" else []
        a1, a2 = med(A1), med(A2)
        for w, A, aw in (("dp1", A1, "P=1 (no DDP)"), ("dp2", [], ""), ("procs2", A2, "DDP gloo P=2")):
            xs = [r["samples_per_s"] for r in tr if r["world"] == w]
            s = med(xs)
            eff = s / (2 * one) if s and one and w != "dp1" else None
            aeff = a2 / (2 * a1) if A and w == "procs2" and a1 else None
            an = f"{f(med(A), 4)} ({rng(A)})" if A else "–"
            print(f"| {m} | {w} | {f(s, 4)} ({rng(xs)}) | {f(eff, 3)} | {aw if A else ''} | {an} | {f(aeff, 3)} |")
    print(f"\nload: {loads(g)}\n")

g = sel(group="allreduce")
if g:
    print("## 4. All-reduce busbw GB/s (median over runs; troupe actor: one run)\n")
    print("| P | size | gloo | troupe tcp | tcp/gloo | troupe local | troupe actor | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for p in (2, 4):
        for mib in (1, 16, 64, 256):
            def bw(side, what):
                return [r["busbw_gbs"] for r in sel(group="allreduce", side=side, what=what) if r.get("mib") == mib]
            gl, tc, lo, ac = bw("anchor", f"gloo P={p}"), bw("troupe", f"tcp P={p}"), bw("troupe", f"local P={p}"), bw("troupe", f"actor P={p}")
            rat = med(tc) / med(gl) if tc and gl else None
            print(f"| {p} | {mib} MiB | {f(med(gl))} ({rng(gl)}) | {f(med(tc))} ({rng(tc)}) | {f(rat, 2)} | {f(med(lo))} ({rng(lo)}) | {f(med(ac))} | {loads(sel(group='allreduce', what=f'tcp P={p}'))} |")
    ip = [r["gbyte_s"] for r in sel(group="allreduce", what="iperf3 1 stream")]
    m1 = [med(r["gbs"]) for r in sel(group="allreduce", what="memcpy 1 goroutine")]
    m2 = [med(r["gbs"]) for r in sel(group="allreduce", what="memcpy 2 goroutines")]
    print(f"\nceilings: iperf3 loopback 1 stream {f(med(ip))} GB/s ({rng(ip)}); Go copy 256 MiB: 1 goroutine {f(med(m1))} GB/s, 2 goroutines {f(med(m2))} GB/s")
    if m2:
        M = med(m2)
        print(f"in-process ring memcpy bound busbw <= 6M/7P: P=2 {6*M/14:.3g} GB/s, P=4 {6*M/28:.3g} GB/s (M = {M:.3g})\n")

g = sel(group="ckpt")
if g:
    print("## 5. Checkpoints\n")
    for r in sel(group="ckpt", bench="go"):
        ex = {k: v for k, v in r.items() if k not in ("group", "side", "what", "run", "load1", "cmd", "bench", "name", "n")}
        print(f"- {r['name']} (load {r['load1']}): " + ", ".join(f"{k} {v:.4g}" for k, v in ex.items()))
    for run in (1, 2):
        s = [x for x in sel(group="ckpt", what="train gpt ckpt-every 5 steps", run=run)]
        if not s:
            continue
        p = [x["ckpt_pause_ms"] for x in s if x.get("ckpt_pause_ms")]
        n = [x["step_ms"] for x in s if not x.get("ckpt_pause_ms") and x["step"] > 1]
        w = [x["step_ms"] for x in s if x.get("ckpt_pause_ms")]
        print(f"- troupe train, run {run}: {len(p)} checkpoints, ckpt_pause_ms median {f(med(p))} ({rng(p)}); step_ms median {f(med(n))} without a checkpoint, {f(med(w))} with one")
    print()

g = sel(group="pipeline")
if g:
    print("## 6. Pipeline\n")
    print("| world | samples/s (median, range) | step ms | load |")
    print("|---|---:|---:|---|")
    for what, w in (("gpt dp", "dp1"), ("gpt dp", "dp2"), ("gpt pp2 m4", "dp1")):
        rs = [r for r in sel(group="pipeline", what=what) if r.get("world") == w and "samples_per_s" in r and "step" not in r]
        xs = [r["samples_per_s"] for r in rs]
        name = "--pp 2 --micro-batches 4" if what == "gpt pp2 m4" else f"--dp {w[2:]}"
        print(f"| {name} | {f(med(xs), 4)} ({rng(xs)}) | {f(med([r['step_ms_median'] for r in rs]))} | {loads(rs)} |")
    print("\n| schedule | M | measured bubble | formula (P−1)/(M+P−1) | measured − formula | peak micro-batches on stage 0 | peak act. bytes | step ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in ("gpipe", "1f1b"):
        for m in (1, 4, 8, 32):
            rs = [r for r in sel(group="pipeline", what="bubble", schedule=s, M=m) if r["step"] > 1]
            if not rs:
                continue
            b = med([r.get("bubble_fraction", 0) for r in rs]); fm = rs[0].get("formula_bubble_fraction")
            print(f"| {s} | {m} | {b:.3f} | {fm:.3f} | {b - fm:+.3f} | {max(r.get('peak_micro_batches', 0) for r in rs)} | {med([r.get('peak_activation_bytes') for r in rs]):.0f} | {f(med([r['step_ms'] for r in rs]))} |")
    print("\n| GPT --pp 2 --micro-batches 4 | peak activation bytes (stage 0) | step ms (median, steps > 1) |")
    print("|---|---:|---:|")
    for rc in ("none", "--recompute"):
        rs = [r for r in sel(group="pipeline", what="recompute", recompute=rc) if r["step"] > 1]
        if rs:
            pk = [r["peak_activation_bytes"] for r in sorted(sel(group="pipeline", what="recompute", recompute=rc), key=lambda r: r["step"])]
            print(f"| {rc} | step 1: {pk[0]}, last step: {pk[-1]} | {f(med([r['step_ms'] for r in rs]))} |")
    print()

g = sel(group="elastic")
if g:
    print("## 7. Elastic (each run's figure, ms unless noted)\n")
    e2e = sel(group="elastic", bench="e2e_elastic")
    kills = sel(group="elastic", bench="elastic_kill")
    det = {r["name"].split("/")[-1]: r for r in sel(group="elastic", bench="go")}
    def runs(xs, d=0):
        return ", ".join("–" if x is None else f"{x:.{d}f}" for x in xs) or "–"
    print("| event | source | runs | goal |")
    print("|---|---|---|---|")
    print(f"| kill -9 → step in flight aborted (`generation failed`) | 3 agents | {runs([k['ms_to'].get('generation_failed') for k in kills], 1)} | < 100 ms |")
    print(f"| kill -9 → failure detector reports the member lost | 3 agents | {runs([k['ms_to'].get('member_lost') for k in kills])} | |")
    print(f"| kill -9 → new world formed | 3 agents | {runs([k['ms_to'].get('formed') for k in kills])} | |")
    print(f"| kill -9 → training resumed (`training resumed`) | 3 agents | {runs([k['ms_to'].get('resumed') for k in kills])} | < 2 s |")
    print(f"| kill -9 → a world of 2 completed a step | e2e TestElasticKill | {runs([r.get('kill_to_world2_ms') for r in e2e])} | < 2 s |")
    print(f"| kill -9 of the leader → a world of 2 completed a step | e2e TestElasticLeaderKilled | {runs([r.get('leader_kill_to_world2_ms') for r in e2e])} | < 2 s |")
    print(f"| world commit → first step done (resume_ms) | 3 agents; e2e kill | {runs([k.get('resume_ms') for k in kills], 1)}; {runs([r.get('kill_to_world2_resume_ms') for r in e2e])} | |")
    st_ = ", ".join(f"{k.get('last_step_world3')}→{k.get('first_step_world2')}" for k in kills)
    print(f"| steps: last done by the world of 3 → first by the world of 2 | 3 agents | {st_} | ≤ 1 step lost |")
    tr_ = sel(group="elastic", bench="torchrun_kill")
    if tr_:
        print(f"| anchor: kill -9 → torchrun restarted all 3 workers | torchrun, 3 workers | {runs([r.get('ms_to_workers_restarted') for r in tr_])} | |")
        print(f"| anchor: kill -9 → first step after the restart | torchrun, 3 workers | {runs([r.get('ms_to_first_step') for r in tr_])} | |")
        print(f"| anchor: completed steps redone (checkpoint every 100) | torchrun, 3 workers | {runs([r.get('steps_lost') for r in tr_])} | |")
    print(f"| SIGSTOP → a world of 2 completed a step | e2e TestElasticHungNode | {runs([r.get('sigstop_to_world2_ms') for r in e2e])} | < 1.5 s |")
    print(f"| SIGTERM → a world of 2 completed a step | e2e TestElasticGracefulLeave | {runs([r.get('sigterm_to_world2_ms') for r in e2e])} | |")
    print(f"| join → a world of 4 completed a step (s) | e2e TestElasticJoin | {runs([r.get('join_to_contributing_s') for r in e2e], 2)} | < 3 s + state |")
    for mode, what in (("hang", "SIGSTOP"), ("kill", "SIGKILL"), ("leave", "SIGTERM")):
        if mode in det:
            print(f"| {what} → detected / new world (mean of {det[mode]['n']}) | BenchmarkDetection/{mode} | {det[mode]['detect-ms']:.0f} / {det[mode]['world-ms']:.0f} | |")
    for r in e2e:
        bad = [k for k, v in r["results"].items() if v != "PASS"]
        print(f"\ne2e run {r['run']}: {len(r['results']) - len(bad)} passed" + (f", failed: {', '.join(bad)}" if bad else ""))
    print()
EOF
}

cd "$ROOT"
echo "bench-all: output in $OUT; troupe $TROUPE; anchors $ANCHORS; RUNS=$RUNS; $(nproc) CPUs; $(date -u +%FT%TZ)"
for g in "${GROUPS_RUN[@]}"; do
	case $g in
	gemm | train | dp | allreduce | ckpt | pipeline | elastic | summary) "group_$g" ;;
	*) echo "bench-all: unknown group $g (gemm train dp allreduce ckpt pipeline elastic summary)" >&2; exit 2 ;;
	esac
done
