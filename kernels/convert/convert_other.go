//go:build !amd64 || noasm

package convert

import "github.com/troupe-ml/troupe/kernels"

// ToLow rounds src into dst (same length) to type dt: the reference
// conversion.
func ToLow(dt kernels.DType, dst []uint16, src []float32) { kernels.ToLow(dt, dst, src) }

// FromLow widens src of type dt into dst (same length): the reference
// conversion.
func FromLow(dt kernels.DType, dst []float32, src []uint16) { kernels.FromLow(dt, dst, src) }

// Paths names the conversions' paths: "generic" for both without assembly.
func Paths() [2]string { return [2]string{"generic", "generic"} }
