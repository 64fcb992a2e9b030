//go:build long

package cluster

import (
	"strings"
	"testing"
)

// ZeRO on agents, in shard groups of 2 (hybrid sharding): four agents
// train dp4 under ZeRO-2 and ZeRO-3 (each holding half of the gradients
// and optimizer state, at stage 3 of the weights too; the other shard
// group a replica of it); one is killed and the three survivors re-form
// as one shard group of two, each shard taken from a surviving holder of
// it, the third on standby; a fifth joins and the world is four again,
// the newcomers taking their shards from the replicas. No completed step
// is lost, every sample is trained once, the losses are the fault-free
// run's and the replicas of every shard agree bit for bit at the end.
func TestElasticZeroShardReplicas(t *testing.T) {
	ref := faultFree(t)
	for _, stage := range []string{"2", "3"} {
		t.Run("zero"+stage, func(t *testing.T) { zeroShardReplicas(t, stage, ref) })
	}
}

func zeroShardReplicas(t *testing.T, stage string, ref []float64) {
	c := newCluster(t, 5, 2)
	c.extra = []string{"--zero", stage, "--zero-group", "2"}
	c.startWorld(4)
	c.agents["n4"].cmd.Process.Kill()
	r := c.waitWorld(2, 300)
	t.Logf("kill -9 of n4 (ZeRO shard 1 of replica group 1): one shard group of 2 completed step %d", r.Step)
	c.start(4)
	back := c.waitWorld(4, r.Step)
	t.Logf("n5 joined: a world of 4 again from step %d", back.Step)
	c.check(c.finish("n1", "n2", "n3", "n5"), ref)
	logs := ""
	for _, n := range []string{"n1", "n2", "n3", "n5"} {
		logs += c.agents[n].stderr.String()
	}
	if !strings.Contains(logs, `"state_from":"surviving replicas"`) {
		t.Error("no generation took its state from surviving replicas")
	}
}

// ZeRO-2 and ZeRO-3 over the whole world (one shard group of four): no replica of a
// shard exists, so when its holder is killed every member loads its shard
// from the latest checkpoint (each rank wrote its own) and the job goes on
// from there with the standby in the lost one's place. The steps since
// the checkpoint are trained again from exactly the same state and data:
// their losses repeat bit for bit.
func TestElasticZeroShardFromCheckpoint(t *testing.T) {
	for _, stage := range []string{"2", "3"} {
		t.Run("zero"+stage, func(t *testing.T) { zeroShardFromCheckpoint(t, stage) })
	}
}

func zeroShardFromCheckpoint(t *testing.T, stage string) {
	c := newCluster(t, 5, 2)
	ckpt := t.TempDir()
	c.extra = []string{"--zero", stage, "--zero-group", "4", "--ckpt-dir", ckpt, "--ckpt-every", "100"}
	for i := 0; i < 4; i++ {
		c.start(i)
	}
	formed := c.waitWorld(4, 0)
	c.start(4) // standby: the world stays one shard group of four
	c.waitGeneration(formed.Generation+1, 350)
	c.agents["n2"].cmd.Process.Kill() // the only holder of its shard
	c.checkReplay("n1", "n3", "n4", "n5")
}
