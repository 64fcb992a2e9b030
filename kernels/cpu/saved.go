package cpu

import (
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
)

// saved is the input of a kernel that may read an activation kept in the
// compute type: fp32, or under mixed precision bf16 or fp16 (kernels.
// Backend's ReLU, GELU, ReLUBackward, GELUBackward, LayerNormBackward,
// SoftmaxBackward), widened piece by piece as the kernel reads it, so that
// no fp32 copy of the whole activation is ever made.
type saved struct {
	f []float32
	h Half
}

// savedOf reads b as a saved activation.
func savedOf(b kernels.Buffer) saved {
	if h, ok := b.(Half); ok {
		return saved{h: h}
	}
	return saved{f: F(b)}
}

// Len is the number of values.
func (s saved) Len() int {
	if s.f != nil || s.h.V == nil {
		return len(s.f)
	}
	return len(s.h.V)
}

// at returns values [lo, hi) in fp32: a slice of the buffer itself, or
// widened (exactly) into buf, which must hold hi − lo values.
func (s saved) at(lo, hi int, buf []float32) []float32 {
	if s.h.V == nil {
		return s.f[lo:hi]
	}
	out := buf[:hi-lo]
	convert.FromLow(s.h.T, out, s.h.V[lo:hi])
	return out
}

// low reports whether the values are 16-bit (at copies them).
func (s saved) low() bool { return s.h.V != nil }

// wideBlock is how many values an element-wise kernel widens at a time,
// on the stack.
const wideBlock = 512

// apply runs the element-wise backward kernel k (dx, dy, x) over [lo, hi)
// with x's values in fp32: in one call for fp32, in pieces of wideBlock
// values widened on the stack for a 16-bit x.
func (s saved) apply(k func(dx, dy, x []float32), dx, dy []float32, lo, hi int) {
	if !s.low() {
		k(dx[lo:hi], dy[lo:hi], s.f[lo:hi])
		return
	}
	var tmp [wideBlock]float32
	for a := lo; a < hi; a += wideBlock {
		b := min(a+wideBlock, hi)
		k(dx[a:b], dy[a:b], s.at(a, b, tmp[:]))
	}
}

// apply1 runs the forward kernel k (y, x) over [lo, hi), x's values read
// in fp32 (widened in pieces when 16-bit) and y written in fp32 or, for a
// 16-bit y, computed in fp32 and rounded once (ToLow).
func (s saved) apply1(k func(y, x []float32), y saved, lo, hi int) {
	if !s.low() && !y.low() {
		k(y.f[lo:hi], s.f[lo:hi])
		return
	}
	var tx, ty [wideBlock]float32
	for a := lo; a < hi; a += wideBlock {
		b := min(a+wideBlock, hi)
		if !y.low() {
			k(y.f[a:b], s.at(a, b, tx[:]))
			continue
		}
		out := ty[:b-a]
		k(out, s.at(a, b, tx[:]))
		convert.ToLow(y.h.T, y.h.V[a:b], out)
	}
}

// row returns a scratch row for widening rows of cols values: nil for an
// fp32 operand (at slices the buffer).
func (s saved) row(cols int) []float32 {
	if !s.low() {
		return nil
	}
	return make([]float32, cols)
}
