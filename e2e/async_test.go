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

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/internal/wait"
)

// TestAsyncKilledReplica: asynchronous training with its replicas as
// worker processes (--procs 3 --sync async): kill -9 of one replica
// mid-run, and the job goes on with the other two to its last step and
// exits 0. Nothing is lost: the parameter servers (two shards, in the
// trainer process) hold every parameter and the optimizer state; the
// batch the killed
// replica held is computed by another, so every step's batch is applied
// exactly once (the metrics lines' cursors are the run's batches, each
// once); every applied gradient is within --max-staleness; the loss falls.
func TestAsyncKilledReplica(t *testing.T) {
	asyncReplicaFault(t, []string{"--servers", "2"}, func(t *testing.T, pid int, lines func() int) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}, "replica lost", nil)
}

// TestAsyncKilledReplicaRejoins: with --max-restarts 1 the killed
// replica's process is started again and joins: it computes on the
// server's weights of the moment, and the job's later updates include
// its gradients.
func TestAsyncKilledReplicaRejoins(t *testing.T) {
	var killedAt int
	asyncReplicaFault(t, []string{"--max-restarts", "1"}, func(t *testing.T, pid int, lines func() int) {
		killedAt = lines()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}, "replica rejoined", func(t *testing.T, replica int, recs []e2etest.AsyncLine) {
		n := 0
		for _, r := range recs[killedAt+50:] {
			if r.Async.Replica == replica {
				n++
			}
		}
		if n == 0 {
			t.Errorf("replica %d applied no update after it was killed at step %d and started again", replica, killedAt)
		}
		t.Logf("replica %d applied %d of the updates after step %d", replica, n, killedAt+50)
	})
}

// TestAsyncStoppedReplica: SIGSTOP of one replica process for a while
// (until the others trained 300 more steps: the job does not wait for
// it), then SIGCONT: its gradient, far older than the bound, is rejected
// and its batch computed again; the job ends as above, every batch once.
func TestAsyncStoppedReplica(t *testing.T) {
	asyncReplicaFault(t, nil, func(t *testing.T, pid int, lines func() int) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(pid, syscall.SIGCONT)
		at := lines()
		if !wait.Until(90*time.Second, func() bool { return lines() >= at+300 }) {
			t.Fatalf("the others trained %d steps in 90 s while one replica was stopped", lines()-at)
		}
		t.Logf("%d steps trained while replica process %d was stopped", lines()-at, pid)
	}, "stale gradient rejected", nil)
}

// asyncReplicaFault runs --procs 3 --sync async (and extra), applies
// fault to one replica process once 50 steps are logged, and checks that
// the job completes with nothing lost; logged must appear in its log, and
// check, when set, looks at the metrics lines.
func asyncReplicaFault(t *testing.T, extra []string, fault func(t *testing.T, pid int, lines func() int), logged string, check func(t *testing.T, replica int, recs []e2etest.AsyncLine)) {
	const steps, batch, bound = 3000, 32, 4
	dir := t.TempDir()
	metrics, weights := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "w.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"train", "--model", "mlp", "--data", "synthetic-mlp", "--layers", "784,64,10",
		"--steps", "3000", "--batch", "32", "--procs", "3", "--sync", "async", "--max-staleness", "4",
		"--metrics-out", metrics, "--save", weights, "--json", "--log-format", "json", "--log-level", "debug"}, extra...)
	cmd := exec.CommandContext(ctx, e2etest.Bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := func() int {
		b, _ := os.ReadFile(metrics)
		return bytes.Count(b, []byte("\n"))
	}
	if !wait.Until(90*time.Second, func() bool { return lines() >= 50 }) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("training did not start\n%s", stderr.String())
	}
	victim, rank := replicaPID(t, cmd.Process.Pid)
	fault(t, victim, lines)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the job failed after the fault on replica %d: %v\n%s", rank, err, stderr.String()[max(0, stderr.Len()-4000):])
	}
	if !strings.Contains(stderr.String(), logged) {
		var rel []string
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, "replica") && !strings.Contains(l, "stale gradient") {
				rel = append(rel, l)
			}
		}
		t.Errorf("no log line says %q; those about replicas:\n%s", logged, strings.Join(rel, "\n"))
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
	f, err := os.Open(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []e2etest.AsyncLine
	seen := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l e2etest.AsyncLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Step != len(recs)+1 || seen[l.Cursor] || l.Cursor%batch != 0 || l.Cursor >= steps*batch || l.Async == nil || l.Async.Staleness > bound {
			t.Fatalf("line %d: step %d, batch at %d (trained before: %v), async %+v: want each of the run's batches once within the bound",
				len(recs)+1, l.Step, l.Cursor, seen[l.Cursor], l.Async)
		}
		seen[l.Cursor] = true
		recs = append(recs, l)
	}
	if len(recs) != steps {
		t.Fatalf("%d metrics recs, want %d", len(recs), steps)
	}
	mean := func(ls []e2etest.AsyncLine) float64 {
		s := 0.0
		for _, l := range ls {
			s += l.Loss
		}
		return s / float64(len(ls))
	}
	if first, last := mean(recs[:50]), mean(recs[steps-50:]); !(last < first/2) {
		t.Errorf("mean loss of the first 50 steps %.4f, of the last 50 %.4f: want it halved", first, last)
	}
	if fi, err := os.Stat(weights); err != nil || fi.Size() < 4*(784*64+64*10) {
		t.Errorf("the saved weights: %v", err)
	}
	if check != nil {
		check(t, rank, recs)
	}
	t.Logf("replica %d: %d steps, staleness %v, %d rejected", rank, sum.Steps, sum.Hist, sum.Rejected)
}

// replicaPID finds a replica process of the job at parent and its
// replica index.
func replicaPID(t *testing.T, parent int) (pid, replica int) {
	t.Helper()
	return childWith(t, parent, "TROUPE_ASYNC_REPLICA")
}
