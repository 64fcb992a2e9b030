//go:build long

package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// The shard job: a small GPT on llm.c shards, over several epochs.
const (
	shardSteps   = 600
	shardBatch   = 12
	shardContext = 16
	shardSeed    = 5
)

func shardTrainArgs(dir string) []string {
	return []string{"--model", "gpt", "--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--context", fmt.Sprint(shardContext),
		"--data", dir, "--batch", fmt.Sprint(shardBatch), "--steps", fmt.Sprint(shardSteps), "--seed", fmt.Sprint(shardSeed),
		"--lr", "3e-3", "--log-every", "100", "--threads", "1"}
}

// writeShardCorpus writes two train shards and a val shard (ids below 64)
// and returns the directory and the training windows.
func writeShardCorpus(t *testing.T) (string, int) {
	dir := filepath.Join(t.TempDir(), "shards")
	os.MkdirAll(dir, 0o755)
	windows := 0
	for i, n := range []int{9000, 7001, 1601} {
		toks := make([]uint16, n)
		for j := range toks {
			toks[j] = uint16((j*j/7 + i) % 64)
		}
		var b bytes.Buffer
		if err := data.WriteShard(&b, toks); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("s_train_%06d.bin", i)
		if i == 2 {
			name = "s_val_000000.bin"
		} else {
			windows += (n - 1) / shardContext
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, windows
}

// checkEpochs asserts, from the leaders' step records, that every sample
// of the shards was trained exactly once in each epoch the steps
// completed (and at most once in the epoch they ended in): the samples
// each step's cursor reads, by the sampler every rank uses.
func checkEpochs(t *testing.T, recs []stepRecord, n int) {
	t.Helper()
	s, err := data.NewSampler(n, shardSeed, true)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[uint64][]int{}
	var buf []int
	recs = withUnlogged(t, recs)
	for _, r := range recs {
		buf = s.At(data.Cursor(r.Cursor), r.Batch, buf)
		for k, idx := range buf {
			e := (r.Cursor + uint64(k)) / uint64(n)
			if counts[e] == nil {
				counts[e] = make([]int, n)
			}
			counts[e][idx]++
		}
	}
	last := recs[len(recs)-1]
	end := (last.Cursor + uint64(last.Batch)) / uint64(n) // epochs completed
	if end < 2 {
		t.Fatalf("the job completed %d epochs, want several", end)
	}
	for e, c := range counts {
		for idx, k := range c {
			if k > 1 || e < end && k != 1 {
				t.Fatalf("epoch %d: sample %d trained %d times", e, idx, k)
			}
		}
	}
	t.Logf("%d epochs of %d samples: every sample trained exactly once in each", end, n)
}

// withUnlogged adds to recs (sorted by step) the steps that have no line
// but that the job counted: a step whose next recorded step is one later
// than the step after it, with the cursor one batch further. That happens
// when a rank dies after a step's all-reduce but before the leader heard
// every rank: the leader cannot salvage the step's line (it needs every
// rank's loss), the survivors hold it applied, and without undo copies
// (plain data parallelism keeps none) the next generation goes on after
// it. Its samples were trained; the losses after it, which check holds to
// a fault-free run's, show that they were trained once.
func withUnlogged(t *testing.T, recs []stepRecord) []stepRecord {
	t.Helper()
	var out []stepRecord
	for i, r := range recs {
		if i > 0 {
			p := recs[i-1]
			if r.Step == p.Step+2 && r.Cursor == p.Cursor+2*uint64(p.Batch) {
				t.Logf("step %d has no line: counted from the cursor (%d)", p.Step+1, p.Cursor+uint64(p.Batch))
				out = append(out, stepRecord{Step: p.Step + 1, Cursor: p.Cursor + uint64(p.Batch), Batch: p.Batch})
			}
		}
		out = append(out, r)
	}
	return out
}

// kill -9 of an agent mid-epoch on token shards: the survivors re-form
// and finish; the losses are a fault-free run's, the replicas identical,
// and every sample of the shards is trained exactly once per epoch.
func TestElasticKillShards(t *testing.T) {
	dir, n := writeShardCorpus(t)
	m := filepath.Join(t.TempDir(), "ref.jsonl")
	e2etest.Troupe(t, 3*time.Minute, append(append([]string{"train"}, shardTrainArgs(dir)...), "--metrics-out", m)...)
	ref := e2etest.Field(t, e2etest.ReadFile(t, m), "loss")
	if len(ref) != shardSteps {
		t.Fatalf("the fault-free run logged %d steps", len(ref))
	}

	c := newCluster(t, 3, 2)
	c.train = shardTrainArgs(dir)
	for i := range 3 {
		c.start(i)
	}
	c.waitWorld(3, 0)
	// Step 150 is cursor 1800, inside the second epoch of 999 samples.
	c.waitSteps(150)
	c.agents["n2"].cmd.Process.Kill()
	killed := time.Now()
	r := c.waitWorld(2, 150)
	t.Logf("kill -9 of n2 at cursor about %d (epoch %d); a world of 2 completed step %d %.0f ms later",
		r.Cursor, r.Cursor/uint64(n), r.Step, float64(time.Since(killed).Milliseconds()))
	c.check(c.finish("n1", "n3"), ref)
	recs := c.steps()
	if !slices.ContainsFunc(recs, func(r stepRecord) bool { return r.World == 3 }) {
		t.Fatal("no step ran in the world of 3")
	}
	checkEpochs(t, recs, n)
}
