package e2e

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/internal/wait"
)

// TestKillDuringCheckpointWrites: kill -9 of a training process at random
// moments while it writes a checkpoint every step never leaves `latest`
// unloadable: after each kill the latest checkpoint opens and every CRC
// verifies (or there is none yet), no older checkpoint is torn, and the
// next run resumes from it.
func TestKillDuringCheckpointWrites(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(7, 7))
	args := []string{"train", "--ckpt-dir", dir, "--ckpt-every", "1", "--keep", "2", "--steps", "100000", "--resume",
		"--d-model", "64", "--n-layers", "2", "--batch", "8", "--log-format", "json"}
	kills, committed := 0, 0
	for round := 0; round < 6; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, e2etest.Bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		// Let it write a few checkpoints, then kill it at a random moment.
		waitForCheckpoint(t, dir, 30*time.Second)
		time.Sleep(time.Duration(r.IntN(400)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cancel()
		kills++
		step, err := checkpoint.Latest(checkpoint.OSFS{}, dir)
		if err != nil {
			t.Fatalf("round %d: after kill -9, latest is unreadable: %v\n%s", round, err, stderr.String())
		}
		ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, dir)
		if err != nil {
			t.Fatalf("round %d: latest (step %d) does not open: %v", round, step, err)
		}
		if err := ck.Verify(); err != nil {
			t.Fatalf("round %d: latest (step %d) fails verification: %v", round, step, err)
		}
		ck.Close()
		// Nor a torn older checkpoint: a kill while pruning one must not
		// leave a step directory that lacks files.
		rep, err := checkpoint.Inspect(checkpoint.OSFS{}, dir, true)
		if err != nil {
			t.Fatalf("round %d: inspect: %v", round, err)
		}
		for _, c := range rep.Checkpoints {
			if !c.OK {
				t.Fatalf("round %d: %s is damaged after kill -9: %s", round, c.Name, c.Error)
			}
		}
		committed++
		t.Logf("round %d: killed; latest is step %d, verified", round, step)
	}
	// The survivor inspects clean and resumes.
	if out, errs, err := e2etest.Run(t, time.Minute, e2etest.Bin, "ckpt", "inspect", dir); err != nil {
		t.Fatalf("troupe ckpt inspect after %d kills: %v\n%s%s", kills, err, out, errs)
	}
	step, _ := checkpoint.Latest(checkpoint.OSFS{}, dir)
	final := append(append([]string{}, args...), "--steps", itoa(int(step)+2))
	e2etest.Troupe(t, 2*time.Minute, final...)
	if committed != kills {
		t.Fatalf("%d of %d kills left a verifiable checkpoint", committed, kills)
	}
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// waitForCheckpoint waits until dir has a committed checkpoint newer than
// the one there when it was called.
func waitForCheckpoint(t *testing.T, dir string, timeout time.Duration) {
	t.Helper()
	before, _ := checkpoint.Latest(checkpoint.OSFS{}, dir)
	if !wait.Until(timeout, func() bool {
		s, err := checkpoint.Latest(checkpoint.OSFS{}, dir)
		if err != nil && !errors.Is(err, checkpoint.ErrNoCheckpoint) && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("reading latest while training: %v", err)
		}
		return err == nil && s > before
	}) {
		t.Fatalf("no new checkpoint in %s within %v", dir, timeout)
	}
}

// TestProcsCheckpointResume: a 2-process world writes its checkpoint as one
// shard per rank, committed by the coordinator; a resumed run continues
// with bit-identical losses.
func TestProcsCheckpointResume(t *testing.T) {
	dir := t.TempDir()
	base := []string{"train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--batch", "32",
		"--steps", "10", "--procs", "2"}
	whole := runLosses(t, base)
	e2etest.Troupe(t, 3*time.Minute, append(append([]string{}, base...), "--steps", "10", "--ckpt-dir", dir, "--ckpt-every", "5")...)
	// Keep only the step-5 checkpoint as the latest: resume from there.
	if err := os.WriteFile(filepath.Join(dir, "latest"), []byte("step-000005\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(t.TempDir(), "m.jsonl")
	e2etest.Troupe(t, 3*time.Minute, append(append([]string{}, base...), "--ckpt-dir", dir, "--resume", "--metrics-out", m)...)
	got := e2etest.Field(t, e2etest.ReadFile(t, m), "loss")
	if len(got) != 5 {
		t.Fatalf("resumed run logged %d steps, want 5", len(got))
	}
	for i, l := range got {
		if l != whole[5+i] {
			t.Errorf("step %d: resumed loss %v, uninterrupted %v", 6+i, l, whole[5+i])
		}
	}
}
