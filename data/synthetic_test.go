package data

import (
	"math"
	"slices"
	"testing"
)

func fillAll(ds Dataset) *Batch {
	idx := make([]int, ds.Len())
	for i := range idx {
		idx[i] = i
	}
	var b Batch
	ds.Fill(idx, &b)
	return &b
}

func TestSyntheticMLP(t *testing.T) {
	o := DefaultOptions()
	o.Seed = 3
	train, test, err := Open("synthetic-mlp:features=20,classes=4,n=300,test=50", o)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 300 || test.Len() != 50 || train.Features() != 20 || train.Classes() != 4 || train.Kind() != Dense {
		t.Fatalf("shapes: %d/%d × %d, %d classes", train.Len(), test.Len(), train.Features(), train.Classes())
	}
	b := fillAll(train)
	var counts [4]int
	for _, y := range b.Y {
		counts[y]++
	}
	for c, n := range counts {
		if n < 20 {
			t.Errorf("class %d has %d of 300 samples: the teacher should spread labels", c, n)
		}
	}
	// Same seed: same data, and a sample does not depend on n; another
	// seed: different data.
	again, _, _ := Open("synthetic-mlp:features=20,classes=4,n=100", o)
	b2 := fillAll(again)
	if !slices.Equal(b.X[:100*20], b2.X) || !slices.Equal(b.Y[:100], b2.Y) {
		t.Error("the first 100 samples changed with n")
	}
	o.Seed = 4
	other, _, _ := Open("synthetic-mlp:features=20,classes=4,n=100", o)
	if slices.Equal(fillAll(other).X, b2.X) {
		t.Error("seeds 3 and 4 gave the same features")
	}
	// Test rows continue the same stream: test sample 0 is sample n.
	longer, _, _ := Open("synthetic-mlp:features=20,classes=4,n=301", DefaultOptions())
	short, shortTest, _ := Open("synthetic-mlp:features=20,classes=4,n=300", DefaultOptions())
	_ = short
	if !slices.Equal(fillAll(longer).X[300*20:], fillAll(shortTest).X[:20]) {
		t.Error("test sample 0 is not stream sample n")
	}
	// Defaults: 784 features, 10 classes, 2048 + 512 samples.
	d, dt, err := Open("synthetic-mlp", DefaultOptions())
	if err != nil || d.Features() != 784 || d.Classes() != 10 || d.Len() != 2048 || dt.Len() != 512 {
		t.Errorf("defaults: %v", err)
	}
	// Options supply sizes when the spec does not.
	o = Options{Features: 3, Classes: 2, Samples: 7, TestSamples: 2}
	d, dt, _ = Open("synthetic-mlp", o)
	if d.Features() != 3 || d.Len() != 7 || dt.Len() != 2 {
		t.Errorf("sizes from Options: %d × %d, test %d", d.Len(), d.Features(), dt.Len())
	}
}

// The generator's normals: over 1.6 M values the mean is within 0.005 of 0
// and the variance within 0.01 of 1 (standard errors 0.0008 and 0.0011;
// fixed seed, so no flakiness).
func TestSyntheticNormal(t *testing.T) {
	train, _, err := Open("synthetic-mlp:n=2048,test=1", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var sum, sq float64
	x := fillAll(train).X
	for _, v := range x {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(x))
	variance := sq/float64(len(x)) - mean*mean
	if math.Abs(mean) > 0.005 || math.Abs(variance-1) > 0.01 {
		t.Errorf("features mean %.4f variance %.4f, want 0 and 1", mean, variance)
	}
}

func TestSyntheticTokens(t *testing.T) {
	o := DefaultOptions()
	o.Context = 16
	train, test, err := Open("synthetic-tokens:n=50,test=5", o)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 50 || test.Len() != 5 || train.Classes() != 65 || train.Context() != 16 || train.Kind() != Tokens {
		t.Fatalf("shapes: %d/%d windows, vocab %d, context %d", train.Len(), test.Len(), train.Classes(), train.Context())
	}
	if _, ok := train.(TextDataset); ok {
		t.Error("synthetic tokens claim a text vocabulary")
	}
	b := fillAll(train)
	seen := map[int32]bool{}
	for r := range 50 {
		row, y := b.Tokens[r*16:(r+1)*16], b.Y[r*16:(r+1)*16]
		if !slices.Equal(row[1:], y[:15]) {
			t.Fatalf("window %d: targets are not the inputs shifted by one", r)
		}
		if r+1 < 50 && y[15] != b.Tokens[(r+1)*16] {
			t.Fatalf("window %d's last target is not window %d's first token", r, r+1)
		}
		for _, id := range row {
			if id < 0 || id >= 65 {
				t.Fatalf("token %d outside the vocabulary", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 65 {
		t.Errorf("800 uniform draws hit only %d of 65 ids", len(seen))
	}
	small, _, err := Open("synthetic-tokens:vocab=3,context=4,n=2", o)
	if err != nil || small.Classes() != 3 || small.Context() != 4 {
		t.Errorf("vocab=3,context=4: %v", err)
	}
}
