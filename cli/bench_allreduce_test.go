package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// With allreduceWorkerTestEnv set, this test binary is one rank of a
// multi-process bench (see allreduceWorkerEnv): init runs the worker command
// and exits before any test runs. It builds the command itself because the
// root command is not assembled yet when this init runs.
const allreduceWorkerTestEnv = "TROUPE_BENCH_ALLREDUCE_TEST_WORKER"

func init() {
	if os.Getenv(allreduceWorkerTestEnv) == "" {
		return
	}
	cmd := newBenchAllReduceWorkerCmd()
	args := os.Args[1:]
	for len(args) > 0 && args[0] != "allreduce-worker" {
		args = args[1:]
	}
	if len(args) == 0 {
		os.Exit(2)
	}
	// the flags the parent passes to the root command
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "")
	cmd.Flags().StringVar(&logFormat, "log-format", "json", "")
	cmd.SetArgs(args[1:])
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"16MiB": 16 << 20, "1M": 1 << 20, "64kB": 64000, "4096": 4096, "1.5KiB": 1536, "2GiB": 2 << 30, "8B": 8} {
		if got, err := allreduceParseSize(in); err != nil || got != want {
			t.Fatalf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1M", "lots", "1TiB"} {
		if _, err := allreduceParseSize(in); err == nil {
			t.Fatalf("%q accepted", in)
		}
	}
}

func allreduceRunBench(t *testing.T, args ...string) []benchAllReduceResult {
	t.Helper()
	// flags keep their values between runs of the command: reset them first
	defaults := []string{"bench", "allreduce", "--json", "--algo", "ring", "--hosts", "1", "--sub-chunk", "1MiB", "--window", "0", "--warmup", "3", "--iters", "0"}
	out, err := runRoot(t, append(defaults, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rs []benchAllReduceResult
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var r benchAllReduceResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		rs = append(rs, r)
	}
	return rs
}

func allreduceCheckResults(t *testing.T, rs []benchAllReduceResult, transport string, P int, sizes ...int64) {
	t.Helper()
	if len(rs) != len(sizes) {
		t.Fatalf("%d results, want %d", len(rs), len(sizes))
	}
	for i, r := range rs {
		if r.Bytes != sizes[i] || r.Ranks != P || r.Transport != transport || !r.Correct || r.Iters != 2 {
			t.Fatalf("result %+v", r)
		}
		if r.TimeMedS <= 0 || r.TimeMinS > r.TimeMedS || r.TimeMaxS < r.TimeMedS {
			t.Fatalf("times %+v", r)
		}
		// the nccl-tests definitions, exactly
		alg := float64(r.Bytes) / r.TimeMedS / 1e9
		if d := r.AlgbwGBs/alg - 1; d > 1e-9 || d < -1e-9 {
			t.Fatalf("algbw %v, want %v", r.AlgbwGBs, alg)
		}
		if d := r.BusbwGBs/(alg*2*float64(P-1)/float64(P)) - 1; P > 1 && (d > 1e-9 || d < -1e-9) {
			t.Fatalf("busbw %v", r.BusbwGBs)
		}
	}
}

func TestBenchAllReduceLocal(t *testing.T) {
	rs := allreduceRunBench(t, "--ranks", "3", "--bytes", "4KiB,64KiB", "--transport", "local", "--iters", "2", "--warmup", "1")
	allreduceCheckResults(t, rs, "local", 3, 4<<10, 64<<10)
	rs = allreduceRunBench(t, "--ranks", "2", "--bytes", "64KiB", "--transport", "local", "--algo", "naive", "--iters", "2", "--warmup", "0")
	if rs[0].Algo != "naive" {
		t.Fatal(rs[0])
	}
	allreduceCheckResults(t, rs, "local", 2, 64<<10)
	// auto: recursive doubling up to the threshold, the ring above; rd
	// forced on every size
	rs = allreduceRunBench(t, "--ranks", "3", "--sizes", "4KiB,1MiB", "--transport", "local", "--algo", "auto", "--iters", "2", "--warmup", "1")
	allreduceCheckResults(t, rs, "local", 3, 4<<10, 1<<20)
	if rs[0].Algo != "rd" || rs[1].Algo != "ring" {
		t.Fatalf("auto ran %s and %s, want rd and ring", rs[0].Algo, rs[1].Algo)
	}
	rs = allreduceRunBench(t, "--ranks", "5", "--sizes", "4KiB,1MiB", "--transport", "local", "--algo", "rd", "--iters", "2", "--warmup", "1")
	allreduceCheckResults(t, rs, "local", 5, 4<<10, 1<<20)
	if rs[0].Algo != "rd" || rs[1].Algo != "rd" {
		t.Fatalf("--algo rd ran %s and %s", rs[0].Algo, rs[1].Algo)
	}
	// 16-bit values: S bytes are S/2 values, each rank's ones summing to
	// exactly P in either type
	for _, dt := range []string{"bf16", "fp16"} {
		rs = allreduceRunBench(t, "--ranks", "3", "--bytes", "4KiB,64KiB", "--transport", "local", "--dtype", dt, "--iters", "2", "--warmup", "1")
		allreduceCheckResults(t, rs, "local", 3, 4<<10, 64<<10)
		if rs[0].DType != dt {
			t.Fatalf("dtype %q, want %s", rs[0].DType, dt)
		}
	}
}

// TestBenchAllReduceProcesses runs the multi-process transports: the ranks
// are copies of this test binary in worker mode.
func TestBenchAllReduceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	allreduceWorkerEnv = []string{allreduceWorkerTestEnv + "=1"}
	defer func() { allreduceWorkerEnv = nil }()
	// tcp: bf16 by the ring; actor: auto, so the 4 KiB all-reduce runs
	// recursive doubling and the 256 KiB one the ring
	for _, tr := range []string{"tcp", "shm", "actor"} {
		rs := allreduceRunBench(t, "--ranks", "2", "--bytes", "4KiB,256KiB", "--transport", tr, "--iters", "2", "--warmup", "1", "--sub-chunk", "64KiB", "--timeout", "2m",
			"--dtype", map[string]string{"tcp": "bf16", "shm": "fp32", "actor": "fp32"}[tr], "--algo", map[string]string{"tcp": "ring", "shm": "auto", "actor": "auto"}[tr])
		allreduceCheckResults(t, rs, tr, 2, 4<<10, 256<<10)
		if rs[0].Procs != 2 {
			t.Fatalf("procs %d", rs[0].Procs)
		}
		if want := map[string]string{"tcp": "ring", "shm": "rd", "actor": "rd"}[tr]; rs[0].Algo != want || rs[1].Algo != "ring" {
			t.Fatalf("%s ran %s and %s, want %s and ring", tr, rs[0].Algo, rs[1].Algo, want)
		}
		// shm reduces in registered memory (its workers refuse to run
		// when the transport would not read it in place)
		if rs[1].Registered != (tr == "shm") {
			t.Fatalf("%s: registered %v", tr, rs[1].Registered)
		}
	}
	rs := allreduceRunBench(t, "--ranks", "2", "--bytes", "256KiB", "--transport", "shm", "--private-buffers", "--iters", "2", "--warmup", "1", "--sub-chunk", "64KiB", "--timeout", "2m")
	allreduceCheckResults(t, rs, "shm", 2, 256<<10)
	if rs[0].Registered {
		t.Fatal("--private-buffers reported registered memory")
	}
	// two "hosts" of two rank processes: auto runs recursive doubling on
	// 4 KiB and the hierarchical all-reduce on 256 KiB (shared memory in
	// each host, TCP between them), every element right
	rs = allreduceRunBench(t, "--ranks", "4", "--hosts", "2", "--bytes", "4KiB,256KiB", "--transport", "auto", "--algo", "auto", "--iters", "2", "--warmup", "1", "--sub-chunk", "64KiB", "--timeout", "2m")
	allreduceCheckResults(t, rs, "auto", 4, 4<<10, 256<<10)
	if rs[0].Algo != "rd" || rs[1].Algo != "hier" {
		t.Fatalf("--hosts 2 ran %s and %s, want rd and hier", rs[0].Algo, rs[1].Algo)
	}
}

func TestBenchAllReduceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--ranks", "0"},
		{"--bytes", "3"},
		{"--bytes", "1MiB,x"},
		{"--transport", "carrier-pigeon"},
		{"--algo", "tree"},
		{"--transport", "actor", "--sub-chunk", "4MiB"},
		{"--sub-chunk", "6"},
		{"--dtype", "fp8"},
		{"--algo", "naive", "--dtype", "bf16"},
		{"--algo", "rd", "--dtype", "bf16"},
		{"--algo", "rd", "--bytes", "2MiB"},
		{"--transport", "shm", "--tls"},
		{"--transport", "tcp", "--private-buffers"},
		{"--transport", "local", "--private-buffers"},
		{"--ranks", "4", "--hosts", "3", "--transport", "auto"},
		{"--ranks", "4", "--hosts", "2"}, // the local transport is one process
		{"--ranks", "4", "--hosts", "2", "--transport", "shm"},
		{"--ranks", "4", "--transport", "auto", "--algo", "hier"},
		{"--ranks", "4", "--hosts", "4", "--transport", "auto", "--algo", "hier"},
		{"--ranks", "4", "--hosts", "2", "--transport", "auto", "--algo", "hier", "--dtype", "bf16"},
	} {
		var out bytes.Buffer
		rootCmd.SetOut(&out)
		_, err := runRoot(t, append([]string{"bench", "allreduce", "--ranks", "2", "--bytes", "4KiB", "--transport", "local", "--algo", "ring", "--hosts", "1", "--dtype", "fp32", "--sub-chunk", "1MiB", "--private-buffers=false"}, args...)...)
		if !errors.Is(err, errUsage) {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}
