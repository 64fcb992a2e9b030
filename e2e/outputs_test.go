package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// TestUnwritableOutputsFailBeforeTraining: every output of troupe train
// that cannot be written is refused before the first step, with a
// non-zero exit and a message naming its flag. The default run trains for
// tens of seconds; the refusal comes before its "training" line.
func TestUnwritableOutputsFailBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"--save", []string{"--save", filepath.Join(missing, "w.safetensors")}},
		{"--report", []string{"--report", filepath.Join(missing, "r.html")}},
		{"--metrics-out", []string{"--metrics-out", filepath.Join(file, "m.jsonl")}},
		{"--ckpt-dir", []string{"--ckpt-dir", file, "--ckpt-every", "10"}},
		{"--trace", []string{"--trace", dir, "--pp", "2", "--micro-batches", "2"}},
		{"--dump-dir", []string{"--dump-dir", filepath.Join(file, "dumps")}},
		{"--cpuprofile", []string{"--cpuprofile", filepath.Join(missing, "cpu.pprof")}},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			start := time.Now()
			_, stderr, err := e2etest.Run(t, time.Minute, e2etest.Bin, append([]string{"train", "--log-format", "json"}, tc.args...)...)
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("exit: %v, want a non-zero exit\nstderr:\n%s", err, stderr)
			}
			last := e2etest.LastLine(stderr)
			if !strings.Contains(last, tc.flag+" ") && !strings.Contains(last, tc.flag+":") {
				t.Fatalf("the error does not name %s: %q", tc.flag, last)
			}
			if strings.Contains(stderr, `"msg":"training"`) {
				t.Fatalf("training started before %s was refused:\n%s", tc.flag, stderr)
			}
			t.Logf("%.2f s: %s", time.Since(start).Seconds(), last)
		})
	}
}

// TestCheckpointOnAFullDiskSavesTheWeights: a checkpoint directory on a
// filesystem too small for one checkpoint ends the run non-zero, naming the
// cause, after the weights were written to --save; they load.
func TestCheckpointOnAFullDiskSavesTheWeights(t *testing.T) {
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(small, 0) })
	w := filepath.Join(t.TempDir(), "w.safetensors")
	_, stderr, err := e2etest.Run(t, 2*time.Minute, e2etest.Bin, "train", "--steps", "6", "--ckpt-dir", small, "--ckpt-every", "2",
		"--save", w, "--log-format", "json", "--threads", "1")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exit: %v, want a non-zero exit\nstderr:\n%s", err, stderr)
	}
	last := e2etest.LastLine(stderr)
	if !strings.Contains(last, "no space left on device") || !strings.Contains(last, "were written to "+w) {
		t.Fatalf("the error does not name the cause and the saved weights: %q", last)
	}
	// The saved weights load: a run starts from them.
	e2etest.Troupe(t, 2*time.Minute, "train", "--steps", "1", "--init", w, "--threads", "1", "--log-level", "warn")
}
