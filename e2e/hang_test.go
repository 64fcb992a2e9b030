package e2e

import (
	"bytes"
	"context"
	"errors"
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
)

// workerProcess finds the worker process of rank rank among parent's
// children (by the rank its parent put in its environment).
func workerProcess(t *testing.T, parent, rank int) int {
	t.Helper()
	want := []byte("TROUPE_WORKER_RANK=" + strconv.Itoa(rank) + "\x00")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after it.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err == nil && (bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...))) {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	t.Fatalf("no worker process of rank %d under %d", rank, parent)
	return 0
}

// A hung worker process (SIGSTOP: no connection reset, nothing more from
// it) in a --procs 2 job with --collective-timeout 3s: the job exits
// non-zero within 10 s of the stop (the collective timeout, or as long
// after the other rank answered the step, the bounded wait for the ranks'
// flight recorders, then a bounded grace for the workers to exit), its
// error naming the silent rank and the operation. The flight recorders'
// dumps are in --dump-dir, and troupe explain hang names rank 1 from them.
func TestProcsHungWorkerEndsTheJob(t *testing.T) {
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	dumps := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2etest.Bin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp",
		"--steps", "1000000", "--threads", "1", "--procs", "2", "--collective-timeout", "3s", "--metrics-out", metrics, "--dump-dir", dumps, "--log-format", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var stopped int
	t.Cleanup(func() {
		if stopped != 0 {
			syscall.Kill(stopped, syscall.SIGCONT)
			syscall.Kill(stopped, syscall.SIGKILL)
		}
		cmd.Process.Kill()
	})
	if !wait.Until(time.Minute, func() bool {
		b, _ := os.ReadFile(metrics)
		return bytes.Count(b, []byte("\n")) >= 20
	}) {
		t.Fatalf("no 20 steps within a minute:\n%s", stderr.String())
	}
	stopped = workerProcess(t, cmd.Process.Pid, 1)
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the job still runs 10 s after rank 1 stopped:\n%s", stderr.String())
	}
	t.Logf("the job exited %.1f s after rank 1 stopped: %v", time.Since(at).Seconds(), err)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("exit %v, want a non-zero exit", err)
	}
	// Stopped inside a step's all-reduce, rank 0's collective names it;
	// stopped after its last send of a step, rank 0 answers the step and
	// rank 1 does not: the step call names it.
	last := e2etest.LastLine(stderr.String())
	if !strings.Contains(last, "rank 1") || !strings.Contains(last, "AllReduce") && !strings.Contains(last, "did not answer") {
		t.Errorf("the job's last error does not name rank 1 and the all-reduce or the step it did not answer: %s", last)
	}
	if !strings.Contains(last, "flight recorders: ") || !strings.Contains(last, "troupe explain hang "+dumps) {
		t.Errorf("the job's last error has no flight-recorder verdict and dump directory: %s", last)
	}
	dirs, _ := filepath.Glob(filepath.Join(dumps, "*"))
	if len(dirs) != 1 {
		t.Fatalf("dump directories %v, want one", dirs)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "rank-0.json")); err != nil {
		t.Fatalf("rank 0's dump: %v", err)
	}
	out, err := exec.Command(e2etest.Bin, "explain", "hang", dirs[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("troupe explain hang: %v\n%s", err, out)
	}
	t.Logf("troupe explain hang:\n%s", out)
	// Rank 1 sent no dump (it is stopped): the verdict names it when rank
	// 0 waits in an operation, and the header lists it as missing always.
	if !strings.Contains(string(out), "no dump from ranks [1]") {
		t.Errorf("troupe explain hang does not list rank 1 as missing:\n%s", out)
	}
	if strings.Contains(last, "AllReduce") && !strings.Contains(string(out), "verdict: rank 1 ") {
		t.Errorf("troupe explain hang does not name rank 1:\n%s", out)
	}
}

// A rank alive but stuck outside the collectives (TROUPE_TEST_STRAGGLER:
// rank 1 computes 60 s longer, more than --collective-timeout 2s): rank 0
// times out in the step's first all-reduce, rank 1's control actor still
// answers for its flight recorder, and the alignment names rank 1 as the
// rank that did not enter the operation.
func TestProcsRankOutsideTheCollectiveIsNamed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2etest.Bin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp",
		"--steps", "3", "--threads", "1", "--procs", "2", "--collective-timeout", "2s", "--dump-dir", t.TempDir(), "--log-format", "json")
	cmd.Env = append(os.Environ(), "TROUPE_TEST_STRAGGLER=1:60s")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("exit %v, want a non-zero exit:\n%s", err, out)
	}
	last := e2etest.LastLine(string(out))
	if !strings.Contains(last, "flight recorders: rank 1 did not enter AllReduce") {
		t.Errorf("the last error does not say that rank 1 did not enter the all-reduce: %s", last)
	}
}
