//go:build !amd64 || noasm

package cpu

import "github.com/troupe-ml/troupe/kernels"

// toLow rounds src into dst (same length): the reference conversion.
func toLow(dt kernels.DType, dst []uint16, src []float32) { kernels.ToLow(dt, dst, src) }

// fromLow widens src into dst (same length): the reference conversion.
func fromLow(dt kernels.DType, dst []float32, src []uint16) { kernels.FromLow(dt, dst, src) }

// vecPaths names the conversions' paths (tests log them).
func vecPaths() [2]string { return [2]string{"generic", "generic"} }

// pairRows sets dst[j] to the pair word of lo[j] and hi[j].
func pairRows(dst []float32, lo, hi []uint16) { pairRowsGo(dst, lo, hi) }
