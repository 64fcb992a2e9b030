package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/internal/wait"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// writeInit saves a model's initial weights, the --init every run shares.
func writeInit(t *testing.T, m *nn.Model, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "init.safetensors")
	if err := m.Set.SaveWeights(path, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDataParallelWorlds: --dp 1, 2, 4 and --procs 2 (and --accum 2, the
// shm transport, the ring for every bucket) from
// the same --init weights and data give the same per-step losses as one
// worker on the whole batch for 20 steps, and the replicas stay
// bit-identical (--check-every 1 fails the run otherwise). The tolerance is
// float32 summation order: 1e-4 relative (see train/dp_test.go).
func TestDataParallelWorlds(t *testing.T) {
	mlp, err := models.NewMLP(cpu.New(1), models.MLP{Sizes: []int{784, 64, 10}}, 11)
	mlpInit := writeInit(t, mlp, err)
	gpt, err := models.NewGPT(cpu.New(1), models.GPT{Vocab: 65, Context: 16, DModel: 32, Layers: 2, Heads: 4}, 11)
	gptInit := writeInit(t, gpt, err)
	models := map[string][]string{
		"mlp": {"--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--init", mlpInit, "--batch", "32"},
		"gpt": {"--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
			"--data", "synthetic-tokens", "--init", gptInit, "--batch", "16"},
	}
	worlds := [][]string{
		{"--dp", "2"}, {"--dp", "4"}, {"--procs", "2"},
		{"--dp", "2", "--accum", "2"}, {"--procs", "2", "--accum", "2"},
		// the gradients through shared memory; buckets this small by the
		// ring instead of recursive doubling
		{"--procs", "2", "--transport", "shm"}, {"--dp", "4", "--allreduce-algo", "ring"},
	}
	for name, args := range models {
		base := append(append([]string{"train"}, args...), "--steps", "20", "--check-every", "1", "--bucket-mb", "0.05", "--threads", "2")
		ref := runLosses(t, base)
		for _, w := range worlds {
			t.Run(name+"/"+strings.Join(w, " "), func(t *testing.T) {
				got := runLosses(t, append(append([]string{}, base...), w...))
				if len(got) != 20 {
					t.Fatalf("%d steps logged, want 20", len(got))
				}
				for i := range ref {
					if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
						t.Errorf("step %d: loss %.7f, one worker %.7f", i+1, got[i], ref[i])
					}
				}
			})
		}
	}
}

func runLosses(t *testing.T, args []string) []float64 {
	t.Helper()
	m := filepath.Join(t.TempDir(), "m.jsonl")
	e2etest.Troupe(t, 5*time.Minute, append(args, "--metrics-out", m)...)
	return e2etest.Field(t, e2etest.ReadFile(t, m), "loss")
}

// TestKilledWorkerStopsTheJob: kill -9 of a worker process mid-run ends the
// whole job within seconds with an error naming the lost rank; nothing
// hangs. The same for a pipeline stage process.
func TestKilledWorkerStopsTheJob(t *testing.T) {
	t.Run("data-parallel", func(t *testing.T) { killWorker(t) })
	t.Run("pipeline-stage", func(t *testing.T) { killWorker(t, "--pp", "2", "--micro-batches", "2", "--layers", "784,64,32,10") })
}

func killWorker(t *testing.T, extra ...string) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "m.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"train", "--model", "mlp", "--data", "synthetic-mlp", "--layers", "784,64,10",
		"--steps", "1000000", "--batch", "32", "--procs", "2", "--metrics-out", metrics, "--log-format", "json"}, extra...)
	cmd := exec.CommandContext(ctx, e2etest.Bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until training is under way (a few steps logged).
	if !wait.Until(90*time.Second, func() bool {
		b, _ := os.ReadFile(metrics)
		return bytes.Count(b, []byte("\n")) >= 3
	}) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("training did not start\n%s", stderr.String())
	}
	victim, rank := workerPID(t, cmd.Process.Pid)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err := cmd.Wait()
	elapsed := time.Since(killed)
	if err == nil {
		t.Fatal("the job exited 0 after a worker was killed")
	}
	if ctx.Err() != nil {
		t.Fatalf("the job hung after the kill\n%s", stderr.String())
	}
	if elapsed > 10*time.Second {
		t.Errorf("the job took %v to stop after the kill", elapsed)
	}
	last := e2etest.LastLine(stderr.String())
	if !strings.Contains(last, fmt.Sprintf("rank %d", rank)) {
		t.Errorf("the final error does not name rank %d: %q", rank, last)
	}
	t.Logf("stopped %v after kill -9 of rank %d: %s", elapsed, rank, last)
	if elapsed > time.Second {
		t.Logf("killed at %s\n%s", killed.Format("15:04:05.000"), stderr.String()[max(0, stderr.Len()-6000):])
	}
}

// workerPID finds a worker process of parent and its rank (from its
// environment).
func workerPID(t *testing.T, parent int) (int, int) {
	t.Helper()
	return childWith(t, parent, "TROUPE_WORKER_RANK")
}

// childWith finds a child process of parent whose environment sets key,
// and returns its pid and key's value (a number).
func childWith(t *testing.T, parent int, key string) (int, int) {
	t.Helper()
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(parent)).Output()
	if err != nil {
		t.Fatalf("pgrep: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := strings.CutPrefix(string(kv), key+"="); ok {
				r, _ := strconv.Atoi(v)
				return pid, r
			}
		}
	}
	t.Fatalf("no process under %d with %s", parent, key)
	return 0, 0
}

// TestProcsGradientsInRegisteredMemory: rank processes on one host keep
// their gradients in registered memory over shared memory (the replicas
// read each other's chunks where they lie; TestDataParallelWorlds checks
// the losses of that world), and in private memory over TCP.
func TestProcsGradientsInRegisteredMemory(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		_, stderr, err := e2etest.Run(t, 2*time.Minute, e2etest.Bin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp",
			"--batch", "32", "--steps", "3", "--procs", "2", "--transport", tr, "--log-format", "json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", tr, err, stderr)
		}
		n := strings.Count(stderr, "gradients in registered memory")
		if want := map[string]int{"shm": 2, "tcp": 0}[tr]; n != want {
			t.Fatalf("%s: %d ranks logged gradients in registered memory, want %d\n%s", tr, n, want, stderr)
		}
	}
}
