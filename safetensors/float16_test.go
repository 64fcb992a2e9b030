package safetensors

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// Hand-worked bit patterns. binary16: 1 sign, 5 exponent (bias 15), 10
// mantissa bits; bfloat16: float32's top 16 bits, rounded.
func TestFloat32ToF16Patterns(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
		why  string
	}{
		{0, 0x0000, "zero"},
		{float32(math.Copysign(0, -1)), 0x8000, "negative zero keeps its sign"},
		{1, 0x3c00, "exponent 15, mantissa 0"},
		{-2, 0xc000, "sign, exponent 16"},
		{0.5, 0x3800, "exponent 14"},
		{65504, 0x7bff, "largest finite half"},
		{65519.996, 0x7bff, "just under the overflow threshold rounds down"},
		{65520, 0x7c00, "halfway between 65504 and 2^16: ties to even (0x7c00) = +Inf"},
		{1e6, 0x7c00, "overflow"},
		{float32(math.Inf(1)), 0x7c00, "+Inf"},
		{float32(math.Inf(-1)), 0xfc00, "-Inf"},
		{0x1p-14, 0x0400, "smallest normal half"},
		{0x1p-24, 0x0001, "smallest subnormal"},
		{1023 * 0x1p-24, 0x03ff, "largest subnormal"},
		{0x1p-25, 0x0000, "half the smallest subnormal: tie rounds to even 0"},
		{0x1.000002p-25, 0x0001, "just above the tie rounds up"},
		{3 * 0x1p-25, 0x0002, "1.5 units: tie rounds to even 2"},
		{5 * 0x1p-25, 0x0002, "2.5 units: tie rounds to even 2"},
		{0x1p-26, 0x0000, "quarter unit rounds to 0"},
		{1023.5 * 0x1p-24, 0x0400, "subnormal rounding carries into the smallest normal"},
		{1 + 0x1p-11, 0x3c00, "tie between 1 and 1+2^-10 rounds to even 1"},
		{1 + 3*0x1p-11, 0x3c02, "tie between 1+2^-10 and 1+2^-9 rounds to even"},
		{1 + 0x1p-11 + 0x1p-20, 0x3c01, "above the tie rounds up"},
		{0.1, 0x2e66, "0.1 = 1.6·2^-4: mantissa 0.6·1024 = 614.4 -> 614 (0x266)"},
		{1.0 / 3, 0x3555, "1/3 = 1.333·2^-2: 0.333·1024 = 341.33 -> 341 (0x155)"},
		{float32(math.SmallestNonzeroFloat32), 0x0000, "float32 subnormal underflows"},
	}
	for _, c := range cases {
		if got := Float32ToF16(c.in); got != c.want {
			t.Errorf("Float32ToF16(%g) = %#04x, want %#04x (%s)", c.in, got, c.want, c.why)
		}
	}
	// NaN stays NaN, keeps its sign, and a payload only in the low 13 bits
	// (which truncation would drop, giving Inf) still yields a NaN.
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000} {
		h := Float32ToF16(math.Float32frombits(bits))
		if h&0x7c00 != 0x7c00 || h&0x3ff == 0 || h>>15 != uint16(bits>>31) {
			t.Errorf("Float32ToF16(NaN %#08x) = %#04x, not a NaN with the same sign", bits, h)
		}
	}
}

func TestF16ToFloat32Patterns(t *testing.T) {
	cases := []struct {
		in   uint16
		want float32
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0400, 0x1p-14},
		{0x0001, 0x1p-24}, {0x8001, -0x1p-24}, {0x03ff, 1023 * 0x1p-24}, {0x3555, 0.333251953125},
		{0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))},
	}
	for _, c := range cases {
		if got := F16ToFloat32(c.in); got != c.want {
			t.Errorf("F16ToFloat32(%#04x) = %g, want %g", c.in, got, c.want)
		}
	}
	if got := F16ToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToFloat32(0x8000) = %g, want -0", got)
	}
	if got := F16ToFloat32(0x7e00); !math.IsNaN(float64(got)) {
		t.Errorf("F16ToFloat32(0x7e00) = %g, want NaN", got)
	}
}

func TestBF16Patterns(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
		why  string
	}{
		{1, 0x3f80, "exact"},
		{-2, 0xc000, "exact"},
		{math.Pi, 0x4049, "pi = 0x40490fdb: low half 0x0fdb < 0x8000 rounds down"},
		{1 + 0x1p-8, 0x3f80, "tie between 1 and 1+2^-7 rounds to even"},
		{1 + 3*0x1p-8, 0x3f82, "tie between 0x3f81 and 0x3f82 rounds to even"},
		{1 + 0x1p-8 + 0x1p-20, 0x3f81, "above the tie rounds up"},
		{math.MaxFloat32, 0x7f80, "largest float32 rounds up to +Inf"},
		{float32(math.Inf(-1)), 0xff80, "-Inf"},
		{0x1p-133, 0x0001, "subnormal float32 0x00010000 is exact"},
		{float32(math.SmallestNonzeroFloat32), 0x0000, "2^-149 is below half a bf16 subnormal unit"},
	}
	for _, c := range cases {
		if got := Float32ToBF16(c.in); got != c.want {
			t.Errorf("Float32ToBF16(%g) = %#04x, want %#04x (%s)", c.in, got, c.want, c.why)
		}
	}
	for _, bits := range []uint32{0x7fc00000, 0xff800001, 0x7f800100} {
		h := Float32ToBF16(math.Float32frombits(bits))
		if h&0x7f80 != 0x7f80 || h&0x7f == 0 || h>>15 != uint16(bits>>31) {
			t.Errorf("Float32ToBF16(NaN %#08x) = %#04x, not a NaN with the same sign", bits, h)
		}
	}
	if got := BF16ToFloat32(0x4049); got != 3.140625 {
		t.Errorf("BF16ToFloat32(0x4049) = %g, want 3.140625", got)
	}
}

// Every half widens and narrows back to itself (NaNs to a NaN).
func TestF16RoundTripExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		back := Float32ToF16(f)
		if math.IsNaN(float64(f)) {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
	}
	for h := 0; h < 1<<16; h++ {
		f := BF16ToFloat32(uint16(h))
		if back := Float32ToBF16(f); back != uint16(h) && !math.IsNaN(float64(f)) {
			t.Fatalf("bf16 %#04x -> %g -> %#04x", h, f, back)
		}
	}
}

// format is a reference table of a 16-bit float format: its non-negative
// finite values in float64 (exact) with their bit patterns, followed by the
// value the next pattern would have with an unbounded exponent (2^16 for
// half, 2^128 for bfloat16), standing for +Inf. Rounding to nearest even
// against this table is IEEE 754 rounding, overflow included.
type format struct {
	vals []float64
	pats []uint16
}

func newFormat(maxFinite uint16, infValue float64, widen func(uint16) float32) format {
	var f format
	for p := uint16(0); p <= maxFinite; p++ {
		f.vals = append(f.vals, float64(widen(p)))
		f.pats = append(f.pats, p)
	}
	f.vals = append(f.vals, infValue)
	f.pats = append(f.pats, maxFinite+1)
	return f
}

// round returns the reference pattern for finite x, searching the table in
// float64, where every float32 and every table value is exact.
func (f format) round(x float64) uint16 {
	sign := uint16(0)
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	n := len(f.vals)
	if x >= f.vals[n-1] {
		return sign | f.pats[n-1]
	}
	i := sort.SearchFloat64s(f.vals, x) // first vals[i] >= x
	if f.vals[i] == x {
		return sign | f.pats[i]
	}
	lo, hi := i-1, i
	dl, dh := x-f.vals[lo], f.vals[hi]-x
	switch {
	case dl < dh:
		return sign | f.pats[lo]
	case dh < dl:
		return sign | f.pats[hi]
	case f.pats[lo]&1 == 0:
		return sign | f.pats[lo]
	default:
		return sign | f.pats[hi]
	}
}

// Float32ToF16 and Float32ToBF16 against the float64 reference, over every
// float32 upper half-word and low half-words chosen to hit ties, just-above
// and just-below ties, and random bits.
func TestFloat16AgainstReference(t *testing.T) {
	half := newFormat(0x7bff, 0x1p16, F16ToFloat32)
	bf := newFormat(0x7f7f, 0x1p128, BF16ToFloat32)
	rng := rand.New(rand.NewPCG(1, 2))
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x7fff, 0x8000, 0x8001, 0xffff}
	for hi := uint32(0); hi < 1<<16; hi++ {
		for k := 0; k < len(lows)+2; k++ {
			var lo uint32
			if k < len(lows) {
				lo = lows[k]
			} else {
				lo = rng.Uint32() & 0xffff
			}
			f := math.Float32frombits(hi<<16 | lo)
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				continue
			}
			if got, want := Float32ToF16(f), half.round(float64(f)); got != want {
				t.Fatalf("Float32ToF16(%g = %#08x) = %#04x, reference %#04x", f, hi<<16|lo, got, want)
			}
			if got, want := Float32ToBF16(f), bf.round(float64(f)); got != want {
				t.Fatalf("Float32ToBF16(%g = %#08x) = %#04x, reference %#04x", f, hi<<16|lo, got, want)
			}
		}
	}
}
