// Package gradcheck checks a layer's backward pass against finite
// differences of its forward pass: the test every explicit-backward layer
// of troupe (and any nn.Layer a user writes) should pass before it trains.
//
// Layer runs the layer once forward and backward on a random input x and a
// random upstream gradient dy, then perturbs each checked element θ of the
// input and of every parameter by ±h, in its float32 storage, and compares
// the analytic gradient with the central difference
//
//	(f(θ+h) − f(θ−h)) / (θ₊ − θ₋),   f = Σ y·dy,
//
// f accumulated in float64 from the layer's float32 output, θ₊ − θ₋ the
// perturbation float32 actually stored. f is the scalar whose gradient the
// backward pass computes when handed dy, so every input and parameter
// gradient is checked by one scalar.
//
// Step and tolerances (Options; the defaults are for float32 layers):
//
//   - h = Eps·rms(tensor), Eps 1e-2 by default: the step scales with the
//     tensor, so weights initialised at std 0.02 and activations of std 1
//     are both moved by a percent of their size. The central difference's
//     truncation error is O(h²) times the third derivative, about 1e-4
//     relative for a smooth layer at that step.
//   - f carries float32 rounding of the order k·u·S, with u = 2⁻²⁴,
//     S = Σ|y·dy| and k = Noise (32 by default: the depth of roundings a
//     transformer block's output goes through); the difference quotient
//     magnifies it by 1/h. So a numeric derivative is good to
//     Noise·u·S/h absolute, added to the tolerance.
//   - An element passes when |analytic − numeric| ≤ RelTol·|numeric| +
//     AbsTol·rms(analytic gradient of its tensor) + Noise·u·S/h, with
//     RelTol 1e-2 (the truncation above, with margin, and float32's
//     rounding of the analytic side) and AbsTol 1e-3 (a gradient far below
//     its tensor's typical size is checked to that floor, not relatively).
//
// A bug in a backward pass (a missing term, a transposed product, a wrong
// scale) is off by O(1) relative, far beyond these tolerances.
//
// Layer also checks that a second backward pass accumulates (parameter
// gradients double, as nn.Layer's contract says) and that the passes
// leave nothing on the tape.
//
// The layer must be deterministic and run on one context: a
// tensor-parallel shard needs its whole group running with it and cannot
// be checked alone. Every run of the forward pass costs one Forward, so
// Options.MaxPerTensor bounds the work on large layers.
package gradcheck

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// Options tune the check; the zero value takes every default.
type Options struct {
	// Seed seeds the input, dy and the sampled elements (0 means 1).
	Seed uint64
	// InputStd is the standard deviation of the random input (0 means 1).
	InputStd float64
	// Eps is the finite-difference step relative to a tensor's root mean
	// square (0 means 1e-2).
	Eps float64
	// RelTol and AbsTol are the relative tolerance and the absolute one in
	// units of the tensor's root-mean-square gradient (0 means 1e-2 and
	// 1e-3).
	RelTol, AbsTol float64
	// Noise is the number of float32 roundings assumed in f (0 means 32).
	Noise float64
	// MaxPerTensor bounds the elements checked in each tensor, drawn at
	// random when it has more (0 means 64; negative checks all).
	MaxPerTensor int
	// SkipInput leaves dx unchecked (a layer that returns none).
	SkipInput bool
	// NewCtx makes the contexts the passes run in (a precision, hooks);
	// nil means nn.NewCtx(be, nn.NewPool(be)). Train is set by the check.
	NewCtx func(be kernels.Backend) *nn.Ctx
}

func (o *Options) fill() {
	if o.Seed == 0 {
		o.Seed = 1
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.InputStd, 1)
	def(&o.Eps, 1e-2)
	def(&o.RelTol, 1e-2)
	def(&o.AbsTol, 1e-3)
	def(&o.Noise, 32)
	if o.MaxPerTensor == 0 {
		o.MaxPerTensor = 64
	}
	if o.NewCtx == nil {
		o.NewCtx = func(be kernels.Backend) *nn.Ctx { return nn.NewCtx(be, nn.NewPool(be)) }
	}
}

// u is float32's unit roundoff.
const u = 1.0 / (1 << 24)

// Mismatch is the worst element of a failed check.
type Mismatch struct {
	// Tensor is "input" or the parameter's name, Index the element.
	Tensor string
	Index  int
	// Analytic is the backward pass's value, Numeric the central
	// difference's, Tol the tolerance they missed.
	Analytic, Numeric, Tol float64
	// Failed of Checked elements missed their tolerance.
	Failed, Checked int
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("gradcheck: %d of %d gradient elements off; worst %s[%d]: analytic %.6g, numeric %.6g (|diff| %.3g > tol %.3g)",
		m.Failed, m.Checked, m.Tensor, m.Index, m.Analytic, m.Numeric, math.Abs(m.Analytic-m.Numeric), m.Tol)
}

// checker holds one check's state.
type checker struct {
	be         kernels.Backend
	l          nn.Layer
	rows, cols int
	o          Options
	rng        *rand.Rand
	x, dy      []float32
	s          float64 // Σ|y·dy| at the unperturbed point
}

// Layer checks l's gradients on a random [rows, cols] input; l's
// parameters must be allocated (ParamSet.Finalize). It returns a
// *Mismatch when gradients disagree, another error when the layer breaks
// the nn.Layer contract, nil when every checked element passes. The
// parameters' weights are restored and their gradients left as the
// first backward pass computed them.
func Layer(be kernels.Backend, l nn.Layer, rows, cols int, o Options) error {
	o.fill()
	k := &checker{be: be, l: l, rows: rows, cols: cols, o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9c4ec)), x: make([]float32, rows*cols)}
	for i := range k.x {
		k.x[i] = float32(o.InputStd * k.rng.NormFloat64())
	}
	for _, p := range l.Params() {
		if p.W == nil || p.G == nil {
			return fmt.Errorf("%w: %s has no weights or gradients (ParamSet.Finalize)", ErrContract, p.Name)
		}
	}
	dx, grads, err := k.analytic()
	if err != nil {
		return err
	}
	var worst *Mismatch
	checked, failed := 0, 0
	compare := func(name string, ana []float32, vals []float32, perturb func(i int, v float32)) {
		idx := k.sample(len(vals))
		var ss float64
		for _, g := range ana {
			ss += float64(g) * float64(g)
		}
		rmsG := math.Sqrt(ss / float64(max(1, len(ana))))
		h := o.Eps * rms(vals)
		if h == 0 {
			h = o.Eps
		}
		for _, i := range idx {
			v := vals[i]
			hi, lo := float32(float64(v)+h), float32(float64(v)-h)
			perturb(i, hi)
			fp := k.f()
			perturb(i, lo)
			fm := k.f()
			perturb(i, v)
			step := float64(hi) - float64(lo)
			num := (fp - fm) / step
			a := float64(ana[i])
			tol := o.RelTol*math.Abs(num) + o.AbsTol*rmsG + o.Noise*u*k.s/(step/2)
			checked++
			diff := math.Abs(a - num)
			if diff <= tol && !math.IsNaN(diff) {
				continue
			}
			failed++
			if worst == nil || diff/tol > math.Abs(worst.Analytic-worst.Numeric)/worst.Tol || math.IsNaN(diff) {
				worst = &Mismatch{Tensor: name, Index: i, Analytic: a, Numeric: num, Tol: tol}
			}
		}
	}
	if !o.SkipInput {
		x := k.x
		compare("input", dx, append([]float32(nil), x...), func(i int, v float32) { x[i] = v })
	}
	for pi, p := range l.Params() {
		w := make([]float32, p.Size())
		be.Download(w, p.W)
		one := make([]float32, 1)
		compare(p.Name, grads[pi], w, func(i int, v float32) {
			one[0] = v
			be.Upload(be.View(p.W, i, 1), one)
		})
	}
	if worst != nil {
		worst.Failed, worst.Checked = failed, checked
		return worst
	}
	return nil
}

func rms(v []float32) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss / float64(max(1, len(v))))
}

// sample returns the indices of n elements to check.
func (k *checker) sample(n int) []int {
	if k.o.MaxPerTensor < 0 || n <= k.o.MaxPerTensor {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	return k.rng.Perm(n)[:k.o.MaxPerTensor]
}

// up returns a pooled buffer holding v.
func up(c *nn.Ctx, v []float32) kernels.Buffer {
	b := c.Pool.Get(len(v))
	c.Be.Upload(b, v)
	return b
}

// analytic runs two training passes, checks the contract, and returns dx
// and each parameter's gradient from the first; it also draws dy and
// measures S = Σ|y·dy|.
func (k *checker) analytic() (dx []float32, grads [][]float32, err error) {
	be, ps := k.be, k.l.Params()
	for _, p := range ps {
		be.Fill(p.G, 0)
	}
	var first [][]float32
	for pass := range 2 {
		c := k.o.NewCtx(be)
		c.Train = true
		y := nn.Forward(c, []nn.Layer{k.l}, nn.Act{X: up(c, k.x), Rows: k.rows, Cols: k.cols})
		yh := make([]float32, y.Rows*y.Cols)
		if y.X == nil || y.X.Len() != len(yh) {
			return nil, nil, fmt.Errorf("%w: the layer's output is not the [%d, %d] it says", ErrContract, y.Rows, y.Cols)
		}
		be.Download(yh, y.X)
		if pass == 0 {
			k.dy = make([]float32, len(yh))
			for i := range k.dy {
				k.dy[i] = float32(k.rng.NormFloat64())
				k.s += math.Abs(float64(yh[i]) * float64(k.dy[i]))
			}
		}
		c.Pool.Put(y.X)
		d := nn.Backward(c, []nn.Layer{k.l}, nn.Act{X: up(c, k.dy), Rows: y.Rows, Cols: y.Cols})
		if n := c.Tape.Len(); n != 0 {
			return nil, nil, fmt.Errorf("%w: the backward pass left %d buffers on the tape", ErrContract, n)
		}
		if pass == 0 && !k.o.SkipInput {
			if d.X == nil || d.X.Len() != len(k.x) {
				return nil, nil, fmt.Errorf("%w: the backward pass returned no [%d, %d] input gradient (Options.SkipInput for a layer without one)", ErrContract, k.rows, k.cols)
			}
			dx = make([]float32, len(k.x))
			be.Download(dx, d.X)
		}
		if d.X != nil {
			c.Pool.Put(d.X)
		}
		grads = make([][]float32, len(ps))
		for i, p := range ps {
			grads[i] = make([]float32, p.Size())
			be.Download(grads[i], p.G)
		}
		if pass == 0 {
			first = grads
		}
	}
	// The second pass added the same gradient again.
	// Both add the same products in the same order; only where the sum
	// runs (before or after the old value) may differ, by float32 rounding
	// of the tensor's largest gradient.
	for i, p := range ps {
		var top float64
		for _, g := range first[i] {
			top = math.Max(top, math.Abs(float64(g)))
		}
		for j, g := range grads[i] {
			want := 2 * float64(first[i][j])
			if math.Abs(float64(g)-want) > 1e-5*top {
				return nil, nil, fmt.Errorf("%w: %s[%d] is %g after two backward passes, %g after one: gradients must accumulate", ErrContract, p.Name, j, g, first[i][j])
			}
		}
	}
	// Leave the first pass's gradients, as documented.
	for i, p := range ps {
		be.Upload(p.G, first[i])
	}
	return dx, first, nil
}

// f runs an evaluation pass on the current x and weights and returns
// Σ y·dy in float64.
func (k *checker) f() float64 {
	c := k.o.NewCtx(k.be)
	c.Train = false
	y := nn.Forward(c, []nn.Layer{k.l}, nn.Act{X: up(c, k.x), Rows: k.rows, Cols: k.cols})
	yh := make([]float32, y.Rows*y.Cols)
	k.be.Download(yh, y.X)
	c.Pool.Put(y.X)
	var s float64
	for i, v := range yh {
		s += float64(v) * float64(k.dy[i])
	}
	return s
}
