//go:build long

package cluster

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// The exit statuses of troupe agent that deploy/k8s/job.yaml's policies
// rely on (cmd/troupe's TestK8sManifests checks the policies map them):
// 0 only when the job reached its last step, --leave-exit-code when a
// signal ends the agent before that (it left the job, or had not joined
// it), 1 for a failure (here a permanent one: a --save that cannot be
// written) and 2 for a bad command line.
func TestAgentExitStatuses(t *testing.T) {
	const leave = "143"
	t.Run("finished", func(t *testing.T) {
		c := newCluster(t, 1, 1)
		a := c.startWith(0, "--steps", "20", "--leave-exit-code", leave)
		if s := c.finish("n1")[0]; s.Step != 20 || s.Left {
			t.Fatalf("summary %+v: want step 20, not left", s)
		}
		if code := a.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit status %d after the job's end, want 0", code)
		}
	})
	t.Run("left", func(t *testing.T) {
		c := newCluster(t, 1, 1)
		a := c.startWith(0, "--leave-exit-code", leave)
		c.waitSteps(5)
		a.cmd.Process.Signal(syscall.SIGTERM)
		if code := e2etest.ExitStatus(t, <-a.done); code != 143 {
			t.Fatalf("exit status %d after SIGTERM, want 143\n%s", code, a.stderr.String())
		}
		var s agentSummary
		if err := json.Unmarshal(a.stdout.Bytes(), &s); err != nil || !s.Left {
			t.Errorf("summary %q: want left", a.stdout.String())
		}
		if l := e2etest.LastLine(a.stderr.String()); !strings.Contains(l, "left the job before its end (exit status 143, --leave-exit-code)") {
			t.Errorf("last line %q does not say why the status is 143", l)
		}
	})
	t.Run("not-joined", func(t *testing.T) {
		// Its only seed never answers: the agent keeps trying to join
		// until the signal.
		c := newCluster(t, 1, 1)
		c.ports = append(c.ports, e2etest.FreePort(t))
		a := c.startWith(0, "--join", c.ports[1], "--join-timeout", "2m", "--leave-exit-code", leave)
		waitListening(t, c.ports[0], a)
		a.cmd.Process.Signal(syscall.SIGTERM)
		if code := e2etest.ExitStatus(t, <-a.done); code != 143 {
			t.Fatalf("exit status %d after SIGTERM while joining, want 143\n%s", code, a.stderr.String())
		}
		if l := e2etest.LastLine(a.stderr.String()); !strings.Contains(l, "stopped before the job's end: elastic: cannot join the cluster") {
			t.Errorf("last line %q does not say the agent was stopped while joining", l)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		save := filepath.Join(t.TempDir(), "missing", "w.safetensors")
		args := append([]string{"agent", "--name", "n1", "--listen", e2etest.FreePort(t), "--save", save, "--leave-exit-code", leave}, elasticTrainArgs()...)
		_, errs, err := e2etest.Run(t, time.Minute, e2etest.Bin, args...)
		if code := e2etest.ExitStatus(t, err); code != 1 || !strings.Contains(e2etest.LastLine(errs), save) {
			t.Fatalf("exit status %d, error %q: want 1 naming %s", code, e2etest.LastLine(errs), save)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, bad := range []string{"1", "2", "256", "-1"} {
			args := append([]string{"agent", "--name", "n1", "--listen", e2etest.FreePort(t), "--leave-exit-code", bad}, elasticTrainArgs()...)
			_, errs, err := e2etest.Run(t, time.Minute, e2etest.Bin, args...)
			if code := e2etest.ExitStatus(t, err); code != 2 || !strings.Contains(e2etest.LastLine(errs), "--leave-exit-code "+bad+": want 0 or 3-255") {
				t.Errorf("--leave-exit-code %s: exit status %d, error %q: want 2 naming the flag", bad, code, e2etest.LastLine(errs))
			}
		}
	})
}

// waitListening waits until the agent's gossip port accepts TCP
// connections: the agent has started, and handles signals.
func waitListening(t *testing.T, addr string, a *agentProc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case err := <-a.done:
			t.Fatalf("the agent exited before it listened on %s: %v\n%s", addr, err, a.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent does not listen on %s after a minute\n%s", addr, a.stderr.String())
		}
	}
}
