//go:build amd64 && !noasm

package cpu

import "golang.org/x/sys/cpu"

// vecPair says whether pairRows runs its AVX2 loop.
var vecPair = cpu.X86.HasAVX2

//go:noescape
func pairRowsAVX2(dst *float32, lo, hi *uint16, n int)

//go:noescape
func packPairs32(dst *float32, src *uint16, ld, kc int)

// pairRows sets dst[j] to the pair word of lo[j] and hi[j] (len(dst)
// values).
func pairRows(dst []float32, lo, hi []uint16) {
	n := len(dst) &^ 15
	if n > 0 && vecPair {
		_, _ = lo[len(dst)-1], hi[len(dst)-1]
		pairRowsAVX2(&dst[0], &lo[0], &hi[0], n)
	} else {
		n = 0
	}
	pairRowsGo(dst[n:], lo[n:], hi[n:])
}

// packPairs packs a B micro-panel of pair words straight from a 16-bit
// matrix, as packPairsGo does: the AVX2 loop for a full panel of 32
// columns.
func packPairs(dst []float32, src []uint16, ld, cols, kc, nr int) {
	if vecPair && nr == 32 && cols == 32 && kc > 0 {
		_ = dst[kc*32-1]
		_ = src[(2*kc-1)*ld+31]
		packPairs32(&dst[0], &src[0], ld, kc)
		return
	}
	packPairsGo(dst, src, ld, cols, kc, nr)
}
