package main

import (
	"context"
	"io"
	"math"
	"testing"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/train"
)

// The user's model trains in every world of the example: the held-out
// error falls, the worlds agree (the same model and data cut three ways:
// float32 sums in other orders, 1e-4 relative), weights saved and loaded
// back predict the same bits (run checks), and a run stopped halfway and
// resumed from its checkpoint ends with the weights of a run that was not
// stopped, bit for bit.
func TestCustomModelTrainsInEveryWorld(t *testing.T) {
	const steps = 60
	res, err := run(context.Background(), io.Discard, t.TempDir(), t.TempDir(), steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !(r.FinalMSE < 0.9*r.FirstMSE) {
			t.Errorf("%s: held-out MSE %v after %d steps, %v halfway: it did not fall", r.World, r.FinalMSE, steps, r.FirstMSE)
		}
		for i, p := range r.Predictions {
			if q := res[0].Predictions[i]; math.Abs(float64(p-q)) > 1e-4*math.Max(1, math.Abs(float64(q))) {
				t.Fatalf("%s predicts %v for test row %d, %s %v", r.World, p, i, res[0].World, q)
			}
		}
	}

	trainSet, err := data.InMemory(rows("memory/train", 2048, 1))
	if err != nil {
		t.Fatal(err)
	}
	straight, err := train.Run(context.Background(), config(worlds[0].set, steps), train.Options{Train: trainSet, KeepModel: true})
	if err != nil {
		t.Fatal(err)
	}
	want, got := straight.Trained.Set.HostWeights(), res[0].Trained.Set.HostWeights()
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("weight %d after a stop and a resume: %v, without a stop %v", i, got[i], want[i])
		}
	}
}
