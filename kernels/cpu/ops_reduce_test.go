package cpu

import "testing"

// TestReductionsAccumulateInFloat64: 2²⁴ followed by ones. A float32
// accumulator stays at 2²⁴ (2²⁴ + 1 rounds back down); float64 counts every
// one, exactly.
func TestReductionsAccumulateInFloat64(t *testing.T) {
	const ones = 100_000
	x := make(Buf, ones+1)
	x[0] = 1 << 24
	for i := 1; i < len(x); i++ {
		x[i] = 1
	}
	for _, threads := range []int{1, 2} {
		be := New(threads)
		if got, want := be.Sum(x), float64(1<<24+ones); got != want {
			t.Errorf("threads=%d: Sum = %v, want %v", threads, got, want)
		}
		if got, want := be.SumSquares(x), float64(1<<48+ones); got != want {
			t.Errorf("threads=%d: SumSquares = %v, want %v", threads, got, want)
		}
		// SumRows: one column, the same values; the float32 result is
		// the float64 sum rounded once.
		dst := Buf{0}
		be.SumRows(dst, x)
		if want := float32(1<<24 + ones); dst[0] != want {
			t.Errorf("threads=%d: SumRows = %v, want %v", threads, dst[0], want)
		}
	}
}

func TestSumRowsHandWorked(t *testing.T) {
	dst := Buf{10, 20, 30}
	New(1).SumRows(dst, Buf{1, 2, 3, 4, 5, 6})
	if want := (Buf{15, 27, 39}); dst[0] != want[0] || dst[1] != want[1] || dst[2] != want[2] {
		t.Errorf("SumRows = %v, want %v", dst, want)
	}
}

func TestReduceNoAllocs(t *testing.T) {
	be := New(4)
	x, dst := make(Buf, 1000), make(Buf, 100)
	mustNotAlloc(t, "Sum", func() { be.Sum(x) })
	mustNotAlloc(t, "SumSquares", func() { be.SumSquares(x) })
	mustNotAlloc(t, "SumRows", func() { be.SumRows(dst, x) })
}
