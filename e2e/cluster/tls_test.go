//go:build long

package cluster

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// tlsFlags are agent name's TLS flags for certificates under dir.
func tlsFlags(dir, name string) []string {
	return []string{"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, name+".pem"), "--tls-key", filepath.Join(dir, name+"-key.pem")}
}

// TestElasticTLS: agents with certificates troupe certs made train the
// elastic job over TLS (the actors' gRPC, the gossip streams, the data
// plane) with identical replicas and every sample once; a third agent with
// the cluster key but a certificate of another CA never joins: it exits
// non-zero naming TLS, the cluster logs the refusal, and no world holds
// more than the two.
func TestElasticTLS(t *testing.T) {
	ref := faultFree(t)
	dir := t.TempDir()
	certs, rogue := filepath.Join(dir, "certs"), filepath.Join(dir, "rogue")
	e2etest.Troupe(t, time.Minute, "certs", "--out", certs, "--nodes", "n1,n2")
	e2etest.Troupe(t, time.Minute, "certs", "--out", rogue, "--nodes", "n3", "--ca-name", "intruder CA")

	c := newCluster(t, 3, 2)
	c.startWith(0, tlsFlags(certs, "n1")...)
	c.startWith(1, tlsFlags(certs, "n2")...)
	c.waitSteps(1)
	r := c.startWith(2, append(tlsFlags(rogue, "n3"), "--join-timeout", "3s")...)
	select {
	case err := <-r.done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("the rogue: %v, want a non-zero exit", err)
		}
		if log := r.stderr.String(); !strings.Contains(log, "did not admit this node") || !strings.Contains(log, `cluster CA \"intruder CA\"`) {
			t.Fatalf("the rogue exited (%v) without naming TLS and the CA:\n%s", err, log)
		}
		lines := strings.Split(strings.TrimSpace(r.stderr.String()), "\n")
		t.Logf("the rogue exited (%v): %.400s", err, lines[len(lines)-1])
	case <-time.After(time.Minute):
		// SIGQUIT makes the Go runtime print every goroutine's stack to
		// the rogue's stderr: the dump shows where it waits.
		r.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
		}
		c.dump()
		t.Logf("--- the rogue's whole stderr:\n%s", r.stderr.String())
		t.Fatal("the rogue still runs a minute after it started")
	}
	sums := c.finish("n1", "n2")
	c.check(sums, ref)
	refusals := 0
	for _, n := range []string{"n1", "n2"} {
		for _, l := range strings.Split(c.agents[n].stderr.String(), "\n") {
			if strings.Contains(l, "refused a peer") || strings.Contains(l, "TLS handshake failed") {
				if refusals++; refusals == 1 {
					t.Logf("%s: %.300s", n, l)
				}
			}
		}
	}
	if refusals == 0 {
		c.dump()
		t.Fatal("neither cluster node logged the refusal")
	}
	for _, s := range c.steps() {
		if s.World > 2 {
			t.Fatalf("step %d trained in a world of %d", s.Step, s.World)
		}
	}
}
