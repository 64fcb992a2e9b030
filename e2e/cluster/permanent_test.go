//go:build long

package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// failed waits up to within for the named agents to exit non-zero, and
// returns each one's error output.
func (c *cluster) failed(within time.Duration, names ...string) map[string]string {
	c.t.Helper()
	out := map[string]string{}
	deadline := time.After(within)
	for _, n := range names {
		a := c.agents[n]
		select {
		case err := <-a.done:
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				c.dump()
				c.t.Fatalf("agent %s exited with %v, want a non-zero exit", n, err)
			}
		case <-deadline:
			c.dump()
			c.t.Fatalf("agent %s still runs %v later", n, within)
		}
		out[n] = a.stderr.String()
		c.t.Logf("agent %s: %s", n, e2etest.LastLine(out[n]))
	}
	return out
}

// A permanent failure ends the job on every agent: the directory of the
// final weights is gone by the end of the run. Both agents exit non-zero,
// naming the path, within seconds; no generation is retried.
func TestElasticUnwritableSaveEndsTheJob(t *testing.T) {
	c := newCluster(t, 2, 2)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	save := filepath.Join(out, "w.safetensors")
	c.extra = []string{"--save", save, "--steps", "1500"}
	c.start(0)
	c.start(1)
	c.waitWorld(2, 0)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	logs := c.failed(30*time.Second, "n1", "n2")
	t.Logf("both agents exited %.1f s after the directory went", time.Since(removed).Seconds())
	for n, l := range logs {
		if !strings.Contains(e2etest.LastLine(l), save) {
			t.Errorf("agent %s's error does not name %s: %q", n, save, e2etest.LastLine(l))
		}
	}
	for _, r := range c.steps() {
		if r.Generation != 1 {
			t.Fatalf("step %d ran in generation %d: the failure was retried", r.Step, r.Generation)
		}
	}
}

// A --save path that cannot be written is refused before the agent joins.
func TestAgentRefusesAnUnwritableSave(t *testing.T) {
	save := filepath.Join(t.TempDir(), "missing", "w.safetensors")
	args := append([]string{"agent", "--name", "n1", "--listen", e2etest.FreePort(t), "--save", save}, elasticTrainArgs()...)
	_, errs, err := e2etest.Run(t, time.Minute, e2etest.Bin, args...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(e2etest.LastLine(errs), save) {
		t.Fatalf("exit %v, error %q: want a non-zero exit naming %s", err, e2etest.LastLine(errs), save)
	}
}

// A world that shrinks below what its pipeline needs ends the job: three
// agents hold three stages, one dies after training started, and the two
// left cannot hold three stages. Both exit non-zero within 30 s, naming
// the cause.
func TestElasticWorldTooSmallEndsTheJob(t *testing.T) {
	c := newCluster(t, 3, 2)
	c.extra = []string{"--layers", "784,64,32,10", "--pp", "3", "--micro-batches", "2", "--steps", "1000000"}
	for i := range 3 {
		c.start(i)
	}
	c.waitWorld(3, 0)
	c.waitSteps(50)
	c.agents["n3"].cmd.Process.Kill()
	killed := time.Now()
	for n, l := range c.failed(30*time.Second, "n1", "n2") {
		if !strings.Contains(e2etest.LastLine(l), "2 members cannot hold 3 pipeline stages") {
			t.Errorf("agent %s: %q", n, e2etest.LastLine(l))
		}
	}
	t.Logf("both agents exited %.1f s after the kill", time.Since(killed).Seconds())
}

// Replicas that differ end the job naming the odd one out: one agent of
// three starts from other initial weights (another --seed), and every
// agent exits non-zero saying which member diverged.
func TestElasticDivergenceEndsTheJob(t *testing.T) {
	c := newCluster(t, 3, 3)
	c.extra = []string{"--check-every", "10"}
	c.start(0)
	c.start(1)
	c.startWith(2, "--seed", "7")
	for n, l := range c.failed(60*time.Second, "n1", "n2", "n3") {
		if last := e2etest.LastLine(l); !strings.Contains(last, "replicas diverged") || !strings.Contains(last, "member n3") {
			t.Errorf("agent %s: %q", n, last)
		}
	}
}
