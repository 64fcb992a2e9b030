//go:build !amd64

package collective

// addTo adds src into dst element by element (len(src) ≥ len(dst)).
func addTo(dst, src []float32) { addGo(dst, src) }
