package cpu

import "testing"

// TestPlanTranspose: size-1 axes vanish and source axes that stay adjacent
// and in order merge, so attention's head split is a batch of 2-D swaps
// with a contiguous inner row.
func TestPlanTranspose(t *testing.T) {
	for _, tc := range []struct {
		shape, perm   []int
		dims, strides []int
	}{
		// [B, T, H, D] → [B, H, T, D]: nothing merges; inner stride 1.
		{[]int{2, 5, 4, 8}, []int{0, 2, 1, 3}, []int{2, 4, 5, 8}, []int{160, 8, 32, 1}},
		// Identity: one contiguous axis.
		{[]int{2, 3, 4}, []int{0, 1, 2}, []int{24}, []int{1}},
		// [A, B, C] → [C, A, B]: A and B merge into one axis of 6.
		{[]int{2, 3, 4}, []int{2, 0, 1}, []int{4, 6}, []int{1, 4}},
		// Size-1 axes dropped; what is left is a 2-D transpose.
		{[]int{1, 3, 1, 5}, []int{3, 2, 1, 0}, []int{5, 3}, []int{1, 5}},
		// All ones: a single element.
		{[]int{1, 1}, []int{1, 0}, []int{1}, []int{1}},
	} {
		n := 1
		for _, s := range tc.shape {
			n *= s
		}
		pl := planTranspose(tc.shape, tc.perm, n)
		if pl.N != len(tc.dims) || !equalInts(pl.Dims[:pl.N], tc.dims) || !equalInts(pl.Strides[:pl.N], tc.strides) {
			t.Errorf("plan(%v, %v) = dims %v strides %v, want %v %v", tc.shape, tc.perm, pl.Dims[:pl.N], pl.Strides[:pl.N], tc.dims, tc.strides)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTransposeBadArgs(t *testing.T) {
	be := New(1)
	b := make(Buf, 6)
	mustPanicWith(t, "Transpose: 2-axis shape with a 1-axis perm", func() { be.Transpose(b, b, []int{2, 3}, []int{0}) })
	mustPanicWith(t, "Transpose: perm [1 1] is not a permutation of 0..1", func() { be.Transpose(b, b, []int{2, 3}, []int{1, 1}) })
	mustPanicWith(t, "Transpose: perm [0 2] is not a permutation of 0..1", func() { be.Transpose(b, b, []int{2, 3}, []int{0, 2}) })
	mustPanicWith(t, "Transpose: shape [2 4] has 8 elements, buffers have 6", func() { be.Transpose(b, b, []int{2, 4}, []int{1, 0}) })
	mustPanicWith(t, "Transpose: negative size in shape [-2 -3]", func() { be.Transpose(b, b, []int{-2, -3}, []int{1, 0}) })
	mustPanicWith(t, "Transpose: 7 axes, at most 6", func() {
		be.Transpose(b[:1], b[:1], []int{1, 1, 1, 1, 1, 1, 1}, []int{0, 1, 2, 3, 4, 5, 6})
	})
}

func TestTransposeNoAllocs(t *testing.T) {
	be := New(4)
	src, dst := make(Buf, 2*5*4*8), make(Buf, 2*5*4*8)
	mustNotAlloc(t, "Transpose", func() { be.Transpose(dst, src, []int{2, 5, 4, 8}, []int{0, 2, 1, 3}) })
	mustNotAlloc(t, "Transpose/2D", func() { be.Transpose(dst, src, []int{40, 8}, []int{1, 0}) })
}
