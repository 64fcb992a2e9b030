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

// packPairs (vector where this CPU has it) packs a B micro-panel straight
// from the 16-bit matrix to the bits of pairing its rows first and then
// packing the pair words (pairRowsOf, packBPanelGo), for full and partial
// panels.
func TestPackPairs(t *testing.T) {
	const nr, ld = 32, 45
	for _, cols := range []int{32, 31, 1} {
		for _, kc := range []int{1, 2, 7, 20} {
			src := make([]uint16, 2*kc*ld)
			for i := range src {
				src[i] = uint16(i*2654435761>>7) | 1
			}
			paired := make([]float32, kc*ld)
			pairRowsOf(paired, src, 2*kc, ld, ld)
			want := make([]float32, kc*nr)
			packBPanelGo(want, paired, ld, false, cols, kc, nr)
			got := make([]float32, kc*nr)
			for i := range got {
				got[i] = float32(math.NaN()) // every word must be written
			}
			packPairs(got, src, ld, cols, kc, nr)
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("cols=%d kc=%d: word %d is %#08x, want %#08x", cols, kc, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}
}
