package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAsyncKilledReplica: asynchronous training with its replicas as
// worker processes (--procs 3 --sync async): kill -9 of one replica
// mid-run, and the job goes on with the other two to its last step and
// exits 0. Nothing is lost: the parameter server (in the trainer process)
// holds every parameter and the optimizer state; the batch the killed
// replica held is computed by another, so every step's batch is applied
// exactly once (the metrics lines' cursors are the run's batches, each
// once); every applied gradient is within --max-staleness; the loss falls.
func TestAsyncKilledReplica(t *testing.T) {
	const steps, batch, bound = 1500, 32, 4
	dir := t.TempDir()
	metrics, weights := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "w.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, troupeBin, "train", "--model", "mlp", "--data", "synthetic-mlp", "--layers", "784,64,10",
		"--steps", "1500", "--batch", "32", "--procs", "3", "--sync", "async", "--max-staleness", "4",
		"--metrics-out", metrics, "--save", weights, "--json", "--log-format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(metrics); bytes.Count(b, []byte("\n")) >= 50 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("training did not start\n%s", stderr.String())
		}
	}
	victim, rank := workerPID(t, cmd.Process.Pid)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the job failed after kill -9 of replica %d: %v\n%s", rank, err, stderr.String()[max(0, stderr.Len()-4000):])
	}
	if !strings.Contains(stderr.String(), "replica lost") {
		t.Errorf("no log line says a replica was lost")
	}
	var sum struct {
		Steps    int     `json:"steps"`
		Final    float64 `json:"final_loss"`
		Hist     []int64 `json:"staleness_histogram"`
		Rejected int64   `json:"rejected"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, stdout.String())
	}
	if sum.Steps != steps || len(sum.Hist) > bound+1 {
		t.Fatalf("summary: %d steps (want %d), staleness histogram %v (bound %d)", sum.Steps, steps, sum.Hist, bound)
	}
	type line struct {
		Step   int     `json:"step"`
		Loss   float64 `json:"loss"`
		Cursor uint64  `json:"cursor"`
		Async  *struct {
			Staleness int `json:"staleness"`
		} `json:"async"`
	}
	f, err := os.Open(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []line
	seen := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Step != len(lines)+1 || seen[l.Cursor] || l.Cursor%batch != 0 || l.Cursor >= steps*batch || l.Async == nil || l.Async.Staleness > bound {
			t.Fatalf("line %d: step %d, batch at %d (trained before: %v), async %+v: want each of the run's batches once within the bound",
				len(lines)+1, l.Step, l.Cursor, seen[l.Cursor], l.Async)
		}
		seen[l.Cursor] = true
		lines = append(lines, l)
	}
	if len(lines) != steps {
		t.Fatalf("%d metrics lines, want %d", len(lines), steps)
	}
	mean := func(ls []line) float64 {
		s := 0.0
		for _, l := range ls {
			s += l.Loss
		}
		return s / float64(len(ls))
	}
	if first, last := mean(lines[:50]), mean(lines[steps-50:]); !(last < first/2) {
		t.Errorf("mean loss of the first 50 steps %.4f, of the last 50 %.4f: want it halved", first, last)
	}
	if fi, err := os.Stat(weights); err != nil || fi.Size() < 4*(784*64+64*10) {
		t.Errorf("the saved weights: %v", err)
	}
	t.Logf("kill -9 of replica %d: %d steps, staleness %v, %d rejected", rank, sum.Steps, sum.Hist, sum.Rejected)
}
