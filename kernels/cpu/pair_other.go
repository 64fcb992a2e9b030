//go:build !amd64 || noasm

package cpu

// pairRows sets dst[j] to the pair word of lo[j] and hi[j].
func pairRows(dst []float32, lo, hi []uint16) { pairRowsGo(dst, lo, hi) }

// packPairs packs a B micro-panel of pair words (packPairsGo).
func packPairs(dst []float32, src []uint16, ld, cols, kc, nr int) {
	packPairsGo(dst, src, ld, cols, kc, nr)
}
