package e2e

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/safetensors"
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

// A ZeRO-3 checkpoint of two worker processes (each writing its own
// shards of the weights and the optimizer state) converts to one plain
// safetensors file: the weights the run saved, bit for bit.
func TestZeroCheckpointConverts(t *testing.T) {
	dir := t.TempDir()
	save, ckpt, out := filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "c.safetensors")
	troupe(t, 2*time.Minute, "train", "--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
		"--data", "synthetic-tokens", "--batch", "8", "--steps", "4", "--threads", "1", "--procs", "2", "--zero", "3",
		"--ckpt-dir", ckpt, "--ckpt-every", "4", "--save", save)
	troupe(t, time.Minute, "ckpt", "convert", ckpt, "--out", out)
	want, err := safetensors.Open(save)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if len(got.Tensors) != len(want.Tensors) {
		t.Fatalf("the converted checkpoint has %d tensors, the saved weights %d", len(got.Tensors), len(want.Tensors))
	}
	for _, info := range want.Tensors {
		name := info.Name
		w, _, err := want.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		g, _, err := got.Float32(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, saved %d", name, len(g), len(w))
		}
		for i := range w {
			if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
				t.Fatalf("%s[%d]: converted %v, saved %v", name, i, g[i], w[i])
			}
		}
	}
}
