//go:build long

package cluster

import (
	"fmt"
	"strings"
	"testing"
)

// Two test hosts (network namespaces) with two agents each: the replicas'
// handshake finds two hosts of two ranks, so every agent's gradient
// all-reduce (one bucket of 50,890 values, above the recursive doubling
// threshold) runs hierarchically, the steps inside a host through shared
// memory and only the middle step across the veth links; the job ends with
// identical replicas, every sample once, and the one-process run's losses
// (check's tolerance: the sums add in another order).
func TestNetHierarchicalAllReduce(t *testing.T) {
	const steps = 30
	ref := faultFreeSteps(t, steps)
	c, _ := newNetClusterPerHost(t, 2, 2, 4)
	c.extra = []string{"--steps", fmt.Sprint(steps)}
	for i := range 4 {
		c.start(i)
	}
	c.check(c.finish("n1", "n2", "n3", "n4"), ref)
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		log := c.agents[name].stderr.String()
		if !strings.Contains(log, `"algorithms":"hier×1"`) {
			c.dump()
			t.Fatalf("agent %s did not run its gradient all-reduce hierarchically", name)
		}
	}
}
