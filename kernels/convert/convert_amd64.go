//go:build amd64 && !noasm

package convert

import (
	"golang.org/x/sys/cpu"

	"github.com/troupe-ml/troupe/kernels"
)

// Implemented in convert_amd64.s over whole blocks of 16 values; the Go
// wrappers below do the rest with the reference conversions.

//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func bf16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32F16C(dst *float32, src *uint16, n int)

//go:noescape
func f32ToF16F16C(dst *uint16, src *float32, n int)

// vecBF16 and vecF16 say whether the vector conversions run: AVX2 for
// bf16 (integer rounding), F16C for fp16 (the hardware's IEEE conversion).
// vecBF16x512 says whether bf16's take their AVX-512F versions, the same
// integer steps on 16 lanes (not VCVTNEPS2BF16, which flushes subnormal
// inputs to zero where the reference rounds them): the conversions took
// 8 % of a bf16 GPT step at one thread on a Zen 5.
var (
	vecBF16     = cpu.X86.HasAVX2
	vecBF16x512 = cpu.X86.HasAVX512F
	vecF16      = cpu.X86.HasAVX && cpu.X86.HasF16C
)

// ToLow rounds src into dst (same length) to type dt, as kernels.ToLow.
func ToLow(dt kernels.DType, dst []uint16, src []float32) {
	n := len(src) &^ 15
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	switch {
	case n > 0 && dt == kernels.BF16 && vecBF16x512:
		f32ToBF16AVX512(&dst[0], &src[0], n)
	case n > 0 && dt == kernels.BF16 && vecBF16:
		f32ToBF16AVX2(&dst[0], &src[0], n)
	case n > 0 && dt == kernels.F16 && vecF16:
		f32ToF16F16C(&dst[0], &src[0], n)
	default:
		n = 0
	}
	kernels.ToLow(dt, dst[n:], src[n:])
}

// FromLow widens src of type dt into dst (same length), as
// kernels.FromLow.
func FromLow(dt kernels.DType, dst []float32, src []uint16) {
	n := len(src) &^ 15
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	switch {
	case n > 0 && dt == kernels.BF16 && vecBF16x512:
		bf16ToF32AVX512(&dst[0], &src[0], n)
	case n > 0 && dt == kernels.BF16 && vecBF16:
		bf16ToF32AVX2(&dst[0], &src[0], n)
	case n > 0 && dt == kernels.F16 && vecF16:
		f16ToF32F16C(&dst[0], &src[0], n)
	default:
		n = 0
	}
	kernels.FromLow(dt, dst[n:], src[n:])
}

// Paths names the conversions' paths, bf16's then fp16's: "avx512" or
// "avx2", and "f16c", where this CPU runs the vector loops, else "generic".
func Paths() [2]string {
	p := [2]string{"generic", "generic"}
	if vecBF16x512 {
		p[0] = "avx512"
	} else if vecBF16 {
		p[0] = "avx2"
	}
	if vecF16 {
		p[1] = "f16c"
	}
	return p
}
