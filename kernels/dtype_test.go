package kernels

import (
	"math"
	"testing"
)

// Every 16-bit pattern widens and narrows back to itself (NaNs to a NaN).
func TestLowRoundTripExhaustive(t *testing.T) {
	for h := range 1 << 16 {
		h := uint16(h)
		if f := F32FromBF16(h); math.IsNaN(float64(f)) {
			if g := F32FromBF16(BF16FromF32(f)); !math.IsNaN(float64(g)) {
				t.Fatalf("bf16 NaN %#04x came back as %v", h, g)
			}
		} else if back := BF16FromF32(f); back != h {
			t.Fatalf("bf16 %#04x → %v → %#04x", h, f, back)
		}
		if f := F32FromF16(h); math.IsNaN(float64(f)) {
			if g := F32FromF16(F16FromF32(f)); !math.IsNaN(float64(g)) {
				t.Fatalf("fp16 NaN %#04x came back as %v", h, g)
			}
		} else if back := F16FromF32(f); back != h {
			t.Fatalf("fp16 %#04x → %v → %#04x", h, f, back)
		}
	}
}

// next16 is the 16-bit pattern one step away from 0 (toward larger
// magnitude), or h itself at the largest magnitude.
func away(h uint16, max uint16) uint16 {
	if h&0x7fff >= max {
		return h
	}
	return h + 1
}

// checkNearest reports whether h is a correctly rounded narrowing of f: no
// neighbour of h is nearer, and a tie went to the even pattern.
func checkNearest(f float64, h uint16, widen func(uint16) float32, maxFinite uint16) bool {
	v := float64(widen(h))
	if math.IsInf(v, 0) {
		// Overflow: f must be at least halfway past the largest finite.
		top := float64(widen(h&0x8000 | maxFinite))
		below := float64(widen(h&0x8000 | (maxFinite - 1)))
		return math.Abs(f) >= math.Abs(top)+(math.Abs(top)-math.Abs(below))/2
	}
	d := math.Abs(f - v)
	for _, n := range []uint16{away(h, maxFinite), h - 1} {
		if h&0x7fff == 0 && n == h-1 {
			n = h ^ 0x8000 // the other zero
		}
		w := float64(widen(n))
		if math.IsInf(w, 0) || math.IsNaN(w) {
			continue
		}
		dn := math.Abs(f - w)
		if dn < d || dn == d && h&1 == 1 && n&1 == 0 && n&0x7fff != h&0x7fff {
			return false
		}
	}
	return true
}

// Narrowing rounds to nearest even: over a stride through every fp32
// pattern (17 million values, every exponent), no neighbour of the result
// is nearer.
func TestNarrowingRoundsToNearestEven(t *testing.T) {
	const stride = 251
	for u := uint64(0); u < 1<<32; u += stride {
		f := math.Float32frombits(uint32(u))
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(F32FromBF16(BF16FromF32(f)))) || !math.IsNaN(float64(F32FromF16(F16FromF32(f)))) {
				t.Fatalf("NaN %#08x narrowed to a number", u)
			}
			continue
		}
		if math.IsInf(float64(f), 0) {
			continue
		}
		if h := BF16FromF32(f); !checkNearest(float64(f), h, F32FromBF16, 0x7f7f) {
			t.Fatalf("bf16 of %v (%#08x) is %#04x = %v: not the nearest", f, u, h, F32FromBF16(h))
		}
		if h := F16FromF32(f); !checkNearest(float64(f), h, F32FromF16, 0x7bff) {
			t.Fatalf("fp16 of %v (%#08x) is %#04x = %v: not the nearest", f, u, h, F32FromF16(h))
		}
	}
	// The edges: halfway cases rounding to even, half's overflow and its
	// smallest subnormal.
	for _, c := range []struct {
		f    float32
		bf16 uint16
		f16  uint16
	}{
		{1, 0x3f80, 0x3c00},
		{65504, 0x4780, 0x7bff},
		{65519.99, 0x4780, 0x7bff},
		{65520, 0x4780, 0x7c00},
		{-1e6, 0xc974, 0xfc00},
		{0x1p-24, 0x3380, 0x0001},
		{0x1p-25, 0x3300, 0x0000},
		{0x1.8p-25, 0x3340, 0x0001},
		{1 + 0x1p-8, 0x3f80, 0x3c04},      // bf16 tie → even (down); exact in fp16
		{1 + 3*0x1p-8, 0x3f82, 0x3c0c},    // bf16 tie → even (up); exact in fp16
		{1 + 0x1p-11, 0x3f80, 0x3c00},     // fp16 tie → even (down)
		{1 + 3*0x1p-11, 0x3f80, 0x3c02},   // fp16 tie → even (up)
		{math.MaxFloat32, 0x7f80, 0x7c00}, // rounds past bf16's largest
		{float32(math.Inf(-1)), 0xff80, 0xfc00},
	} {
		if got := BF16FromF32(c.f); got != c.bf16 {
			t.Errorf("BF16FromF32(%v) = %#04x, want %#04x", c.f, got, c.bf16)
		}
		if got := F16FromF32(c.f); got != c.f16 {
			t.Errorf("F16FromF32(%v) = %#04x, want %#04x", c.f, got, c.f16)
		}
	}
}

func TestParseDType(t *testing.T) {
	for s, want := range map[string]DType{"fp32": F32, "bf16": BF16, "bfloat16": BF16, "fp16": F16, "half": F16} {
		if d, err := ParseDType(s); err != nil || d != want {
			t.Errorf("ParseDType(%q) = %v, %v", s, d, err)
		}
	}
	if _, err := ParseDType("fp8"); err == nil {
		t.Error("fp8 parsed")
	}
}
