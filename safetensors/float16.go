package safetensors

import "math"

// Float32ToF16 returns the IEEE 754 binary16 bit pattern nearest to f,
// rounding to nearest with ties to even (what PyTorch's .half() and numpy's
// astype(float16) do). Values too large become ±Inf, values too small become
// ±0 or a subnormal, and NaN stays NaN (sign and top payload bits kept, quiet
// bit set so the payload cannot truncate to Inf).
func Float32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	man := u & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(man>>13)
	}
	// e is the binary16 biased exponent the value would have.
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Below the smallest normal half: the result is a subnormal, a count
		// of 2^-24 units. The 24-bit significand m is worth m·2^(exp-150),
		// i.e. m >> (14-e) units. Under 2^-25 (e < -10) everything rounds
		// to zero; float32 zeros and subnormals land here too.
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into 0x400, the smallest normal: still correct
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is correct; 0x7c00 is +Inf
	}
	return sign | uint16(r)
}

// F16ToFloat32 widens an IEEE 754 binary16 bit pattern to float32. Every half
// value is exactly representable, so this is exact (NaN payloads included).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case 0:
		// Zero or subnormal: man·2^-24, exact in float32.
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	}
}

// Float32ToBF16 returns the bfloat16 bit pattern nearest to f, rounding to
// nearest with ties to even (PyTorch's .bfloat16()). bfloat16 keeps float32's
// exponent range, so only the mantissa is rounded; the largest float32 values
// round up to ±Inf. NaN keeps its sign and top payload bits with the quiet bit
// set, so it never truncates to Inf.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// BF16ToFloat32 widens a bfloat16 bit pattern to float32 (exact).
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}
