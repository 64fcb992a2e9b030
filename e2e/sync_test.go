package e2e

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// Rounds across worker processes are the rounds of worker actors in one
// process: --procs 2 gives --dp 2's losses under local-sgd and diloco
// (the same sums in the same order; 1e-6 relative for the transports'
// chunking), with the replicas compared at every round (--check-every).
func TestSyncAcrossProcesses(t *testing.T) {
	for _, mode := range [][]string{
		{"--sync", "local-sgd", "--sync-every", "4"},
		{"--sync", "diloco", "--sync-every", "4", "--outer-nesterov", "--sync-dtype", "bf16"},
	} {
		t.Run(mode[1], func(t *testing.T) {
			base := append([]string{"train", "--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
				"--data", "synthetic-tokens", "--batch", "16", "--steps", "12", "--check-every", "4", "--threads", "2"}, mode...)
			ref := runLosses(t, append(append([]string{}, base...), "--dp", "2"))
			got := runLosses(t, append(append([]string{}, base...), "--procs", "2"))
			if len(got) != len(ref) || len(got) != 12 {
				t.Fatalf("%d steps across processes, %d in one; want 12", len(got), len(ref))
			}
			for i := range ref {
				if math.Abs(got[i]-ref[i]) > 1e-6*math.Abs(ref[i]) {
					t.Errorf("step %d: loss %.8f across processes, %.8f in one", i+1, got[i], ref[i])
				}
			}
		})
	}
}

// A checkpoint of replicas that synchronise in rounds holds replica 0's
// optimizer state whole, also when worker processes write it (each
// process would otherwise write its own rows of every tensor, a mix of
// two replicas' AdamW moments): --procs 2 writes what --dp 2 in one
// process writes (replica 0 alone), tensor for tensor, within the 1e-6
// of the two runs' arithmetic.
func TestSyncCheckpointHoldsOneReplica(t *testing.T) {
	base := []string{"train", "--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
		"--data", "synthetic-tokens", "--batch", "16", "--steps", "8", "--threads", "2", "--sync", "local-sgd", "--sync-every", "4",
		"--ckpt-every", "4"}
	open := func(world ...string) *checkpoint.Checkpoint {
		dir := t.TempDir()
		e2etest.Troupe(t, 2*time.Minute, append(append(append([]string{}, base...), "--ckpt-dir", dir), world...)...)
		ck, err := checkpoint.Open(checkpoint.OSFS{}, dir, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ck.Close() })
		return ck
	}
	one, procs := open("--dp", "2"), open("--procs", "2")
	states := 0
	for _, e := range one.Manifest.Tensors {
		a, err := one.ReadTensor(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := procs.ReadTensor(e.Name)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		if strings.HasPrefix(e.Name, checkpoint.OptimPrefix) {
			states++
		}
		x, y := f32s(a.Data), f32s(b.Data)
		for i := range x {
			if d := math.Abs(float64(x[i] - y[i])); d > 1e-6*math.Max(1e-3, math.Abs(float64(x[i]))) {
				t.Fatalf("%s[%d]: %v across processes, %v in one process", e.Name, i, y[i], x[i])
			}
		}
	}
	if states == 0 {
		t.Fatal("no optimizer state in the checkpoint")
	}
}

// f32s reads little-endian float32s.
func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
