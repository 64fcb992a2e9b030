//go:build long

package cluster

import (
	"testing"
	"time"
)

// Elastic agents that synchronise in rounds (local SGD, DiLoCo every 20
// steps): kill -9 of one of three mid-round, the survivors re-form and go
// on from their own progress; a fourth node joins and takes a replica's
// state; the job reaches its last step with every replica holding the
// same bits (the last step ends a round), every sample of the stream
// trained once (the cursor advances by one batch a step), and the loss
// falling to a tenth of the first without ever passing 1.5× it. The losses are not the synchronous run's: replicas step
// on their own gradients between rounds.
func TestElasticSyncKillAndJoin(t *testing.T) {
	for _, mode := range []string{"local-sgd", "diloco"} {
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t, 4, 2)
			c.extra = []string{"--sync", mode, "--sync-every", "20"}
			if mode == "diloco" {
				// An outer momentum of 0.9 on top of the inner SGD's 0.9
				// makes this MLP's steps ~7× larger and the loss blow up
				// (measured): a milder outer optimizer.
				c.extra = append(c.extra, "--outer-lr", "0.5", "--outer-momentum", "0.5", "--outer-nesterov")
			}
			c.startWorld(3)
			c.agents["n2"].cmd.Process.Kill()
			killed := time.Now()
			r := c.waitWorld(2, 300)
			t.Logf("kill -9 of n2; a world of 2 completed step %d %.0f ms later", r.Step, float64(time.Since(killed).Milliseconds()))
			c.start(3)
			back := c.waitWorld(3, r.Step)
			t.Logf("n4 joined: a world of 3 from step %d", back.Step)
			sums := c.finish("n1", "n3", "n4")
			checkReplicas(t, sums)
			recs := c.steps()
			seen := map[int]bool{}
			for i, r := range recs {
				if seen[r.Step] {
					t.Fatalf("step %d logged twice", r.Step)
				}
				seen[r.Step] = true
				if i > 0 {
					p := recs[i-1]
					if want := p.Cursor + uint64(p.Batch)*uint64(r.Step-p.Step); r.Cursor != want {
						t.Fatalf("step %d starts at sample %d, want %d: samples skipped or trained twice", r.Step, r.Cursor, want)
					}
				}
			}
			first, last := recs[0], recs[len(recs)-1]
			if last.Step != elasticSteps || !(last.Loss < first.Loss/10) || !(last.Loss > 0) {
				t.Errorf("last step %d with loss %v, first %v: want step %d and a loss below a tenth of the first", last.Step, last.Loss, first.Loss, elasticSteps)
			}
			for _, r := range recs {
				if !(r.Loss <= 1.5*first.Loss) {
					t.Fatalf("step %d: loss %v, the first %v: training blew up", r.Step, r.Loss, first.Loss)
				}
			}
			t.Logf("loss %.4g → %.4g; worlds by generation: %v", first.Loss, last.Loss, generationsOf(recs))
		})
	}
}
