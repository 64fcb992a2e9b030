package collective

import "golang.org/x/sys/cpu"

// addAVX2 is in vec_amd64.s.
//
//go:noescape
func addAVX2(dst, src *float32, n int)

var hasAVX2 = cpu.X86.HasAVX2

// addTo adds src into dst element by element (len(src) ≥ len(dst)): the
// reduce-scatter's inner loop, 8 lanes at a time where the CPU has AVX2.
func addTo(dst, src []float32) {
	n := len(dst)
	src = src[:n]
	if hasAVX2 && n >= 8 {
		m := n &^ 7
		addAVX2(&dst[0], &src[0], m)
		dst, src = dst[m:], src[m:]
	}
	addGo(dst, src)
}
