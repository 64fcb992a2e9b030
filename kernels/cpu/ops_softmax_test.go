package cpu

import (
	"math"
	"testing"
)

// TestCrossEntropyHandWorked: two equal logits give loss ln 2 and gradient
// (½ − 1, ½)·gradScale; an ignored row gives 0 and a zero gradient row.
func TestCrossEntropyHandWorked(t *testing.T) {
	losses, dl := make(Buf, 2), Buf{9, 9, 9, 9}
	New(1).SoftmaxCrossEntropy(losses, dl, Buf{3, 3, 1, 2}, Ids{0, -100}, 0.5)
	if math.Abs(float64(losses[0])-math.Ln2) > 1e-7 || losses[1] != 0 {
		t.Errorf("losses = %v, want [ln2 0]", losses)
	}
	if want := (Buf{-0.25, 0.25, 0, 0}); dl[0] != want[0] || dl[1] != want[1] || dl[2] != 0 || dl[3] != 0 {
		t.Errorf("dlogits = %v, want %v", dl, want)
	}
}

func TestSoftmaxBadTargets(t *testing.T) {
	be := New(2)
	mustPanicWith(t, "SoftmaxCrossEntropy: targets[1] = 3, but rows have 3 classes", func() {
		be.SoftmaxCrossEntropy(make(Buf, 2), nil, make(Buf, 6), Ids{0, 3}, 1)
	})
	mustPanicWith(t, "ArgmaxCorrect: targets[0] = 7, but rows have 3 classes", func() {
		be.ArgmaxCorrect(make(Buf, 6), Ids{7, 0})
	})
}

// TestArgmaxTies: the first of tied maxima wins, as with torch.argmax.
func TestArgmaxTies(t *testing.T) {
	logits := Buf{1, 5, 5, 0, 2, 2}
	if got := New(1).ArgmaxCorrect(logits, Ids{1, 1}); got != 2 {
		t.Errorf("ArgmaxCorrect(targets at first max) = %d, want 2", got)
	}
	if got := New(1).ArgmaxCorrect(logits, Ids{2, 2}); got != 0 {
		t.Errorf("ArgmaxCorrect(targets at second max) = %d, want 0", got)
	}
}

// TestCausalSoftmaxHandWorked: t = 2; row 0 sees only itself (1), row 1
// softmaxes (0, ln 3)·scale=1 to (¼, ¾).
func TestCausalSoftmaxHandWorked(t *testing.T) {
	y := Buf{9, 9, 9, 9}
	New(1).CausalSoftmax(y, Buf{5, 100, 0, float32(math.Log(3))}, 2, 1)
	want := []float64{1, 0, 0.25, 0.75}
	for i := range want {
		if math.Abs(float64(y[i])-want[i]) > 1e-7 {
			t.Errorf("y = %v, want %v", y, want)
			break
		}
	}
}

func TestSoftmaxNoAllocs(t *testing.T) {
	be := New(4)
	const rows, cols = 8, 64
	x, dl, l, y := make(Buf, rows*cols), make(Buf, rows*cols), make(Buf, rows), make(Buf, rows*cols)
	tg := make(Ids, rows)
	mustNotAlloc(t, "SoftmaxCrossEntropy", func() { be.SoftmaxCrossEntropy(l, dl, x, tg, 1) })
	mustNotAlloc(t, "SoftmaxCrossEntropy/nil", func() { be.SoftmaxCrossEntropy(l, nil, x, tg, 1) })
	mustNotAlloc(t, "ArgmaxCorrect", func() { be.ArgmaxCorrect(x, tg) })
	mustNotAlloc(t, "CausalSoftmax", func() { be.CausalSoftmax(y, x, 8, 0.5) })
	mustNotAlloc(t, "SoftmaxBackward", func() { be.SoftmaxBackward(dl, x, y, cols, 0.5) })
}
