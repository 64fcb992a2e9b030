//go:build amd64 && !noasm

package cpu

import "golang.org/x/sys/cpu"

// vecPair says whether pairRows runs its AVX2 loop.
var vecPair = cpu.X86.HasAVX2

//go:noescape
func pairRowsAVX2(dst *float32, lo, hi *uint16, n int)

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
