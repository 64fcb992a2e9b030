package train

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
)

// A run cancelled between steps stops there, saves the weights of the last
// step it trained, and says it was cancelled (its summary counts the steps
// trained, not the target); the weights are those of an uninterrupted run
// of that many steps.
func TestCancelledRunSavesItsWeights(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyGPT()
	cfg.DP, cfg.Steps, cfg.Batch = 2, 8, 8
	cfg.Schedule = Constant // the reference run is shorter: the rates of its steps must not depend on the length
	cfg.Save = filepath.Join(dir, "stopped.safetensors")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sum, err := Run(ctx, cfg, Options{OnStep: func(m StepMetrics) {
		if m.Step == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || sum == nil || sum.Saved != cfg.Save || sum.SavedStep != 3 || sum.Steps != 3 {
		t.Fatalf("summary %+v, err %v; want 3 steps, their weights saved and context.Canceled", sum, err)
	}
	ref := cfg
	ref.Steps, ref.Save = 3, filepath.Join(dir, "three.safetensors")
	if _, err := Run(context.Background(), ref, Options{}); err != nil {
		t.Fatal(err)
	}
	a, b := tensors(t, cfg.Save), tensors(t, ref.Save)
	if len(b) == 0 || len(a) != len(b) {
		t.Fatalf("%d tensors saved, %d in the reference", len(a), len(b))
	}
	for name, w := range b {
		if !slices.Equal(a[name], w) {
			t.Fatalf("%s differs from an uninterrupted run of 3 steps", name)
		}
	}
}

func tensors(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]float32{}
	for _, ti := range f.Tensors {
		name := ti.Name
		if out[name], _, err = f.Float32(name); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
