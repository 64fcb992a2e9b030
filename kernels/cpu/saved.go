package cpu

import (
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
)

// saved is the input of a kernel that may read an activation kept in the
// compute type: fp32, or under mixed precision bf16 or fp16 (kernels.
// Backend's ReLU, GELU, ReLUBackward, GELUBackward, LayerNormBackward,
// SoftmaxBackward, SumRows), widened piece by piece as the kernel reads
// it, so that no fp32 copy of the whole activation is ever made; also
// the element-wise kernels' 16-bit outputs and gradients.
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

// activation names the element-wise kernels that read a kept activation:
// the functions and their derivatives. apply and apply1 switch on it rather
// than take a function value, which would make the compiler move their
// stack buffers to the heap on every call.
type activation uint8

const (
	actReLU activation = iota
	actGELU
)

// backward is the fp32 backward kernel of f: dx = dy·f'(x).
func (f activation) backward(dx, dy, x []float32) {
	if f == actReLU {
		reluBackward(dx, dy, x)
	} else {
		geluBackward(dx, dy, x)
	}
}

// forward is the fp32 kernel of f: y = f(x).
func (f activation) forward(y, x []float32) {
	if f == actReLU {
		relu(y, x)
	} else {
		gelu(y, x)
	}
}

// apply runs f's backward kernel over [lo, hi) in fp32: in one call when
// x, dy and dx are fp32, else in pieces of wideBlock values, the 16-bit
// ones widened on the stack and a 16-bit dx rounded once. dx may be dy.
func (s saved) apply(f activation, dx, dy saved, lo, hi int) {
	if !s.low() && !dx.low() && !dy.low() {
		f.backward(dx.f[lo:hi], dy.f[lo:hi], s.f[lo:hi])
		return
	}
	var tx, tdy, tdx [wideBlock]float32
	for a := lo; a < hi; a += wideBlock {
		b := min(a+wideBlock, hi)
		out := tdx[:b-a]
		if !dx.low() {
			out = dx.f[a:b]
		}
		f.backward(out, dy.at(a, b, tdy[:]), s.at(a, b, tx[:]))
		if dx.low() {
			convert.ToLow(dx.h.T, dx.h.V[a:b], out)
		}
	}
}

// apply1 runs f over [lo, hi), x's values read in fp32 (widened in pieces
// when 16-bit) and y written in fp32 or, for a 16-bit y, computed in fp32
// and rounded once (ToLow).
func (s saved) apply1(f activation, y saved, lo, hi int) {
	if !s.low() && !y.low() {
		f.forward(y.f[lo:hi], s.f[lo:hi])
		return
	}
	var tx, ty [wideBlock]float32
	for a := lo; a < hi; a += wideBlock {
		b := min(a+wideBlock, hi)
		if !y.low() {
			f.forward(y.f[a:b], s.at(a, b, tx[:]))
			continue
		}
		out := ty[:b-a]
		f.forward(out, s.at(a, b, tx[:]))
		convert.ToLow(y.h.T, y.h.V[a:b], out)
	}
}

// wideRow is the longest row the row kernels widen on the stack; longer
// rows get a scratch row from the heap, once per call.
const wideRow = 1024

// row returns a scratch row for widening rows of cols values: nil for an
// fp32 operand (at slices the buffer), stack (the caller's array) when the
// row fits it.
func (s saved) row(cols int, stack []float32) []float32 {
	switch {
	case !s.low():
		return nil
	case cols <= len(stack):
		return stack[:cols]
	}
	return make([]float32, cols)
}
