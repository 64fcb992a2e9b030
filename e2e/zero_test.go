package e2e

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/safetensors"
)

// A ZeRO-3 checkpoint of two worker processes (each writing its own
// shards of the weights and the optimizer state) converts to one plain
// safetensors file: the weights the run saved, bit for bit.
func TestZeroCheckpointConverts(t *testing.T) {
	dir := t.TempDir()
	save, ckpt, out := filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "c.safetensors")
	e2etest.Troupe(t, 2*time.Minute, "train", "--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
		"--data", "synthetic-tokens", "--batch", "8", "--steps", "4", "--threads", "1", "--procs", "2", "--zero", "3",
		"--ckpt-dir", ckpt, "--ckpt-every", "4", "--save", save)
	e2etest.Troupe(t, time.Minute, "ckpt", "convert", ckpt, "--out", out)
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
