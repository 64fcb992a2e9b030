//go:build long

package cluster

import (
	"regexp"
	"syscall"
	"testing"
	"time"
)

// A hung agent holding a pipeline stage (SIGSTOP: no connection reset):
// four agents hold two replicas of two stages; n4 stops. Within seconds
// the others' logs name it lost, the generation moves on as one replica
// with a standby, and after SIGCONT the job still ends with the fault-free
// losses and bit-identical replicas.
func TestElasticHungStageAgent(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 4, 2)
	c.extra = []string{"--pp", "2", "--micro-batches", "2"}
	c.startWorld(4)
	hung := c.agents["n4"]
	hung.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	r := c.waitWorld(2, 300)
	t.Logf("SIGSTOP of n4 (stage 1 of replica 1): one replica of two stages completed step %d %.1f s later", r.Step, time.Since(stopped).Seconds())
	named := false
	for _, n := range []string{"n1", "n2", "n3"} {
		if regexp.MustCompile(`"msg":"member lost".*"member":"n4"`).MatchString(c.agents[n].stderr.String()) {
			named = true
		}
	}
	if !named {
		c.dump()
		t.Error("no survivor's log names n4 lost")
	}
	hung.cmd.Process.Signal(syscall.SIGCONT)
	c.check(c.finish("n1", "n2", "n3", "n4"), ref)
}
