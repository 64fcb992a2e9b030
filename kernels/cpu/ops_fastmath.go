package cpu

import "math"

// Float32 exp and erfc for the softmax, cross-entropy and GELU kernels.
// math.Exp and math.Erfc work in float64 and cost 15–40 ns a call here;
// these keep a relative error of a few float32 ulp, which is all a float32
// kernel can use. The slice functions expSum, gelu and geluBackward run the
// AVX2+FMA versions of the same formulas where the CPU has them
// (ops_fastmath_amd64.s) and the Go loops at the end of this file
// elsewhere.

const (
	log2e = 1.44269504088896341
	// ln2Hi + ln2Lo = ln 2; ln2Hi has few mantissa bits, so k·ln2Hi is exact
	// for the |k| ≤ 127 the range reduction produces (Cody–Waite).
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	// roundMagic is 1.5·2²³: adding it to a float32 of magnitude < 2²² rounds
	// to the nearest integer and leaves that integer in the low mantissa bits.
	roundMagic = 12582912.0
)

// exp32 returns e^x with a relative error below 2e-7 (measured in
// TestExp32Accuracy). Outside [-87, 88] (where 2^k would leave the normal
// range) and for NaN it falls back to math.Exp, so underflow to denormals and
// zero, overflow to +Inf and NaN behave as in math.
func exp32(x float32) float32 {
	if !(x >= -87 && x <= 88) {
		return float32(math.Exp(float64(x)))
	}
	t := x*log2e + roundMagic
	k := t - roundMagic
	ki := int32(math.Float32bits(t)) - int32(math.Float32bits(roundMagic))
	r := x - k*ln2Hi
	r -= k * ln2Lo
	// Cephes expf's minimax polynomial for e^r on |r| ≤ ln2/2.
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(ki+127)<<23)
}

// erfcHalf returns erfc(a/√2) for a ≥ 0 with a relative error of about
// 1e-7 everywhere, including the far tail where it is tiny: the Chebyshev fit
// of Numerical Recipes' erfcc (fractional error < 1.2e-7 in exact
// arithmetic), evaluated in float32. Relative accuracy in the tail is what
// GELU needs for negative inputs, where GELU(x) = x·erfc(|x|/√2)/2 is itself
// tiny.
//
// The fit is t·exp(p(t) − z²) with z = a/√2. The exponent reaches −80 before
// the result leaves the float32 range, where one float32 rounding of it is an
// error of 5e-6 relative in the result, so it is formed in float64 (a² is
// exact there) and passed to exp32 as a rounded part plus a correction
// factor: e^(h+l) = e^h·(1+l) for the tiny remainder l.
func erfcHalf(a float32) float32 {
	const invSqrt2 = 0.70710678118654752
	if a > 15 {
		// erfc(15/√2) ≈ 7e-51 is below the smallest float32; returning
		// early also keeps a = +Inf from making 0·Inf below.
		return 0
	}
	z := a * invSqrt2
	t := 1 / (1 + 0.5*z)
	p := float32(0.17087277)
	p = p*t - 0.82215223
	p = p*t + 1.48851587
	p = p*t - 1.13520398
	p = p*t + 0.27886807
	p = p*t - 0.18628806
	p = p*t + 0.09678418
	p = p*t + 0.37409196
	p = p*t + 1.00002368
	p = p*t - 1.26551223
	e := float64(p) - 0.5*float64(a)*float64(a)
	h := float32(e)
	return t * exp32(h) * (1 + float32(e-float64(h)))
}

// normCDF returns Φ(x), the standard normal CDF that PyTorch's exact GELU
// uses: Φ(x) = erfc(−x/√2)/2, computed from the side that keeps precision.
func normCDF(x float32) float32 {
	if x >= 0 {
		return 1 - 0.5*erfcHalf(x)
	}
	return 0.5 * erfcHalf(-x)
}

// expSumGo is expSum in Go: dst[i] = e^(scale·src[i] − shift), Σ dst[i].
func expSumGo(dst, src []float32, scale, shift float32) float64 {
	src = src[:len(dst)]
	var s float64
	for i, v := range src {
		e := exp32(scale*v - shift)
		dst[i] = e
		s += float64(e)
	}
	return s
}

// geluGo is gelu in Go.
func geluGo(y, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] = v * normCDF(v)
	}
}

// geluBackwardGo is geluBackward in Go.
func geluBackwardGo(dx, dy, x []float32) {
	const invSqrt2Pi = 0.39894228040143268
	dy, x = dy[:len(dx)], x[:len(dx)]
	for i, v := range x {
		pdf := invSqrt2Pi * exp32(-0.5*v*v)
		dx[i] = dy[i] * (normCDF(v) + v*pdf)
	}
}
