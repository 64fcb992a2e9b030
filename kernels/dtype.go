package kernels

import (
	"fmt"
	"math"
	"strings"
)

// DType is the element type of a buffer.
type DType uint8

const (
	// F32 is IEEE 754 binary32: every buffer of every backend can be one.
	F32 DType = iota
	// BF16 is bfloat16: fp32's sign and 8-bit exponent with a 7-bit
	// mantissa (the upper half of an fp32), fp32's range at 2⁻⁸ relative
	// precision.
	BF16
	// F16 is IEEE 754 binary16: 5-bit exponent, 10-bit mantissa (2⁻¹¹
	// relative precision), largest finite value 65504.
	F16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "fp32"
	case BF16:
		return "bf16"
	case F16:
		return "fp16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the bytes of one element.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// Low reports whether d is a 16-bit type.
func (d DType) Low() bool { return d == BF16 || d == F16 }

// ParseDType reads fp32 (float32, f32), bf16 (bfloat16) or fp16 (float16,
// f16, half).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "fp32", "float32", "f32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16", "f16", "half":
		return F16, nil
	}
	return 0, fmt.Errorf("dtype %q: want fp32, bf16 or fp16", s)
}

// DTyped is a buffer that says its element type; a Buffer that does not is
// F32.
type DTyped interface {
	DType() DType
}

// DTypeOf is b's element type.
func DTypeOf(b Buffer) DType {
	if t, ok := b.(DTyped); ok {
		return t.DType()
	}
	return F32
}

// LowPrecision is what a backend that stores and computes in bf16 and fp16
// adds to Backend. Its buffers of those types work with Alloc's in:
//
//   - View, Copy (same type), Fill, Upload and Download (converting from and
//     to float32 values, rounding to nearest even);
//   - Gemm, when A and B are both BF16 or both F16 and C is F32 or their
//     type: products and sums in fp32 (C of a low type is rounded once, at
//     the end), as cuBLAS's and oneDNN's mixed-precision GEMMs do.
//
// The kernels that read an activation kept in the compute type (ReLU and
// GELU, whose output may be 16-bit too, ReLUBackward, GELUBackward,
// LayerNormBackward's x, SoftmaxBackward's y) take it in these types too.
// Every other kernel takes F32 buffers only.
type LowPrecision interface {
	// AllocAs returns a zeroed buffer of n values of type dt.
	AllocAs(n int, dt DType) Buffer
	// Convert copies src into dst (same length), converting between their
	// types: narrowing rounds to nearest even, a NaN stays a NaN, and a
	// value past fp16's range becomes ±Inf.
	Convert(dst, src Buffer)
}

// LowPrecisionOf returns be's low-precision kernels, if it has them.
func LowPrecisionOf(be Backend) (LowPrecision, bool) {
	lp, ok := be.(LowPrecision)
	return lp, ok
}

// BF16FromF32 rounds f to the nearest bfloat16 (ties to even); a NaN stays
// a NaN (quiet, sign kept).
func BF16FromF32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// F32FromBF16 widens a bfloat16 exactly.
func F32FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16FromF32 rounds f to the nearest IEEE half (ties to even): a value
// past 65520 becomes ±Inf, one below half's smallest subnormal (2⁻²⁴) by
// more than half of it ±0, a NaN a quiet NaN.
func F16FromF32(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(a>>13)&0x1ff
	case a >= 0x477ff000: // ≥ 65520: rounds past 65504
		return sign | 0x7c00
	case a >= 0x38800000: // ≥ 2⁻¹⁴: normal
		// Rebias the exponent (127 → 15) and round the 13 dropped bits.
		v := a - 0x38000000
		return sign | uint16((v+0xfff+(v>>13)&1)>>13)
	case a < 0x33000000: // < 2⁻²⁵: rounds to zero
		return sign
	}
	// Subnormal half: the value is m·2⁻²⁴ with m = significand >> shift.
	e := a >> 23
	m := a&0x7fffff | 0x800000
	shift := 126 - e // 14 + (113 − e) … the bits below 2⁻²⁴
	half := uint32(1) << (shift - 1)
	r := m >> shift
	rem := m & (1<<shift - 1)
	if rem > half || rem == half && r&1 == 1 {
		r++
	}
	return sign | uint16(r)
}

// F32FromF16 widens an IEEE half exactly (a signaling NaN becomes quiet,
// as IEEE conversions do).
func F32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch {
	case e == 0x1f && m == 0: // Inf
		return math.Float32frombits(sign | 0x7f800000)
	case e == 0x1f: // NaN, quieted (as F16C's VCVTPH2PS does)
		return math.Float32frombits(sign | 0x7fc00000 | m<<13)
	case e != 0: // normal
		return math.Float32frombits(sign | (e+112)<<23 | m<<13)
	case m == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: m·2⁻²⁴, exact in fp32.
	v := float32(m) * (1.0 / (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(v))
}

// ToLow converts f32 to dt's 16-bit values into dst (len(dst) == len(src)).
func ToLow(dt DType, dst []uint16, src []float32) {
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	if dt == BF16 {
		for i, v := range src {
			dst[i] = BF16FromF32(v)
		}
		return
	}
	for i, v := range src {
		dst[i] = F16FromF32(v)
	}
}

// FromLow widens dt's 16-bit values into dst (len(dst) == len(src)).
func FromLow(dt DType, dst []float32, src []uint16) {
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	if dt == BF16 {
		for i, v := range src {
			dst[i] = F32FromBF16(v)
		}
		return
	}
	for i, v := range src {
		dst[i] = F32FromF16(v)
	}
}
