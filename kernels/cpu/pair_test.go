package cpu

import (
	"math"
	"testing"
)

// pairRows (vector where this CPU has it) matches its reference loop at
// every tail length.
func TestPairRows(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 100} {
		lo, hi := make([]uint16, n), make([]uint16, n)
		for i := range lo {
			lo[i], hi[i] = uint16(3*i+1), uint16(0xffff-7*i)
		}
		got, want := make([]float32, n), make([]float32, n)
		pairRows(got, lo, hi)
		pairRowsGo(want, lo, hi)
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("n=%d: word %d is %#08x, want %#08x", n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}
