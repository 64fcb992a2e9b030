package kerneltest

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// lowTypes are the 16-bit types the low-precision suite covers.
var lowTypes = []kernels.DType{kernels.BF16, kernels.F16}

// lowUnit is the unit roundoff of dt: one rounding to it errs by at most
// this much relative (bf16 keeps 8 significant bits, fp16 11).
func lowUnit(dt kernels.DType) float64 {
	if dt == kernels.BF16 {
		return 0x1p-8
	}
	return 0x1p-11
}

// lowSmallest is dt's smallest positive (subnormal for fp16) value: below
// it a rounded result keeps no relative precision.
func lowSmallest(dt kernels.DType) float64 {
	if dt == kernels.BF16 {
		return 0x1p-133
	}
	return 0x1p-24
}

// roundTo rounds v to dt's values (exactly representable afterwards).
func roundTo(dt kernels.DType, v []float32) []float32 {
	h := make([]uint16, len(v))
	kernels.ToLow(dt, h, v)
	out := make([]float32, len(v))
	kernels.FromLow(dt, out, h)
	return out
}

// skipLow skips the test when be has no low-precision kernels.
func (s *suite) lowPrecision() (kernels.LowPrecision, bool) {
	lp, ok := kernels.LowPrecisionOf(s.be)
	if !ok {
		s.t.Skipf("backend %s has no bf16/fp16 kernels (kernels.LowPrecision)", s.be.Caps().Device)
	}
	return lp, ok
}

// upAs allocates a buffer of dt holding vals (rounded by Upload).
func (c *tcase) upAs(lp kernels.LowPrecision, dt kernels.DType, vals []float32) kernels.Buffer {
	b := lp.AllocAs(len(vals), dt)
	if b.Len() != len(vals) || kernels.DTypeOf(b) != dt {
		c.Fatalf("AllocAs(%d, %v): length %d, type %v", len(vals), dt, b.Len(), kernels.DTypeOf(b))
	}
	c.be.Upload(b, vals)
	return b
}

// testConvert: Upload, Download, Fill, View, Copy and Convert of bf16 and
// fp16 buffers round as kernels.BF16FromF32 and F16FromF32 do (to nearest
// even), widen exactly, and convert between every pair of types.
func testConvert(s *suite) {
	lp, _ := s.lowPrecision()
	for _, dt := range lowTypes {
		s.run(dt.String(), func(c *tcase) {
			n := 1000
			v := c.randn(n, 0, 100)
			v[0], v[1], v[2], v[3] = float32(math.NaN()), float32(math.Inf(-1)), 1e6, 0x1p-30
			want := make([]float64, n)
			for i, x := range v {
				want[i] = float64(roundTo(dt, []float32{x})[0])
			}
			zero := make([]float64, n)
			b := c.upAs(lp, dt, v)
			c.check("Upload/Download", c.down(b), want, zero)
			// Convert to fp32 and back, and through the other type.
			f := c.be.Alloc(n)
			lp.Convert(f, b)
			c.check("Convert to fp32", c.down(f), want, zero)
			back := lp.AllocAs(n, dt)
			lp.Convert(back, f)
			c.check("Convert from fp32", c.down(back), want, zero)
			for _, other := range lowTypes {
				o := lp.AllocAs(n, other)
				lp.Convert(o, b)
				w := make([]float64, n)
				for i, x := range want {
					w[i] = float64(roundTo(other, []float32{float32(x)})[0])
				}
				c.check("Convert to "+other.String(), c.down(o), w, zero)
			}
			// A view, a copy and a fill.
			view := c.be.View(b, 10, 20)
			c.check("View", c.down(view), want[10:30], zero[:20])
			cp := lp.AllocAs(20, dt)
			c.be.Copy(cp, view)
			c.check("Copy", c.down(cp), want[10:30], zero[:20])
			c.be.Fill(cp, 1.0/3)
			third := float64(roundTo(dt, []float32{1.0 / 3})[0])
			for i, x := range c.down(cp) {
				if float64(x) != third {
					c.Fatalf("Fill(1/3)[%d] = %v, want %v", i, x, third)
				}
			}
		})
	}
}

// testLowGemm runs bf16 and fp16 products (C fp32 and C of the operands'
// type) over the fp32 suite's shapes, transposes, scalars, padding and
// batches.
//
// Tolerance: the inputs are rounded to the low type before the reference
// sees them, so only the arithmetic errs. A product of two bf16 (8 + 8
// significant bits) or fp16 (11 + 11) values is exact in fp32, and the
// sums are fp32: (K+4)·u·mag as for fp32 GEMM. A C of a low type is
// rounded once more: plus lowUnit·|C| (and half its smallest value, for
// results below its range).
func testLowGemm(s *suite) {
	lp, _ := s.lowPrecision()
	type mnk struct{ m, n, k int }
	sizes := []mnk{{1, 1, 1}, {1, 7, 33}, {7, 1, 33}, {7, 33, 1}, {33, 7, 65}, {3, 4, 0}, {64, 64, 64}, {17, 130, 67}, {33, 100, 1000}}
	for _, dt := range lowTypes {
		for _, outLow := range []bool{false, true} {
			out := "C=fp32"
			if outLow {
				out = "C=" + dt.String()
			}
			for _, sz := range sizes {
				for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					for i, sc := range []struct{ alpha, beta float32 }{{1, 0}, {0.5, -2}} {
						g := kernels.GemmArgs{TransA: tr[0], TransB: tr[1], M: sz.m, N: sz.n, K: sz.k, Alpha: sc.alpha, Beta: sc.beta}
						if i == 1 {
							n := g.Normalize()
							g.LDA, g.LDB, g.LDC = n.LDA+3, n.LDB+3, n.LDC+3
						}
						name := fmt.Sprintf("%v/%s/%s/%dx%dx%d/beta=%g", dt, out, transName(tr), sz.m, sz.n, sz.k, sc.beta)
						s.run(name, func(c *tcase) { c.lowGemm(lp, dt, outLow, g) })
					}
				}
			}
			g := kernels.GemmArgs{TransA: true, M: 7, N: 9, K: 33, Alpha: 1, Beta: 0.5, Batch: 3}
			n := g.Normalize()
			g.StrideA, g.StrideB, g.StrideC = n.StrideA+5, n.StrideB+2, n.StrideC+4
			s.run(fmt.Sprintf("%v/%s/Batch/strided", dt, out), func(c *tcase) { c.lowGemm(lp, dt, outLow, g) })
		}
	}
}

func (c *tcase) lowGemm(lp kernels.LowPrecision, dt kernels.DType, outLow bool, g kernels.GemmArgs) {
	n := g.Normalize()
	a, b, cv := c.gemmOperands(n)
	a, b = roundTo(dt, a), roundTo(dt, b)
	if outLow {
		cv = roundTo(dt, cv)
	}
	want, mag := refGemm(g, a, b, cv)
	tol := rel(float64(n.K+4), mag)
	var cb kernels.Buffer
	if outLow {
		for i := range tol {
			tol[i] += lowUnit(dt)*math.Abs(want[i]) + lowSmallest(dt)/2
		}
		cb = c.upAs(lp, dt, cv)
	} else {
		cb = c.up(cv)
	}
	c.be.Gemm(g, c.upAs(lp, dt, a), c.upAs(lp, dt, b), cb)
	got := c.down(cb)
	if outLow {
		// The sentinel is stored rounded: compare it rounded.
		for i, w := range want {
			if w == cSentinel {
				want[i] = float64(roundTo(dt, []float32{cSentinel})[0])
			}
		}
	}
	c.check("C", got, want, tol)
}

// testLowSaved: the kernels that read an activation kept in the compute
// type (ReLU, GELU and their backward kernels' x and dy, LayerNormBackward's
// x, SoftmaxBackward's y, SumRows' x) take it in bf16 and fp16 and give,
// bit for bit, what they give for its exact fp32 widening: nothing but the
// load changes; ReLU and GELU into a 16-bit y, and their backward kernels
// into a 16-bit dx, give their fp32 result rounded. Sizes leave every tail of a vector loop and of a 512-value
// piece; the element-wise ones also run in place (dx = dy).
func testLowSaved(s *suite) {
	lp, _ := s.lowPrecision()
	same := func(c *tcase, what string, got, want []float32) {
		c.Helper()
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				c.Fatalf("%s[%d] = %v with a 16-bit input, %v with its fp32 widening", what, i, got[i], want[i])
			}
		}
	}
	for _, dt := range lowTypes {
		for _, n := range []int{1, 17, 1000, 1537} {
			s.run(fmt.Sprintf("%v/elementwise/%d", dt, n), func(c *tcase) {
				x := roundTo(dt, c.activationInputs(n))
				dy := c.randn(n, 0, 1)
				for _, k := range []struct {
					name string
					f    func(dx, dy, x kernels.Buffer)
				}{{"ReLUBackward", c.be.ReLUBackward}, {"GELUBackward", c.be.GELUBackward}} {
					want, got := c.up(make([]float32, n)), c.up(make([]float32, n))
					k.f(want, c.up(dy), c.up(x))
					xl := c.upAs(lp, dt, x)
					k.f(got, c.up(dy), xl)
					same(c, k.name, c.down(got), c.down(want))
					inPlace := c.up(dy)
					k.f(inPlace, inPlace, xl)
					same(c, k.name+" in place", c.down(inPlace), c.down(want))
					// A 16-bit gradient: dy widened as it is read, dx
					// computed in fp32 and rounded once (also in place).
					dyl := roundTo(dt, dy)
					want16 := c.up(make([]float32, n))
					k.f(want16, c.up(dyl), c.up(x))
					wide := c.up(make([]float32, n))
					k.f(wide, c.upAs(lp, dt, dyl), xl)
					same(c, k.name+" of a "+dt.String()+" dy", c.down(wide), c.down(want16))
					low := lp.AllocAs(n, dt)
					k.f(low, c.upAs(lp, dt, dyl), xl)
					same(c, k.name+" into "+dt.String(), c.down(low), roundTo(dt, c.down(want16)))
					lowInPlace := c.upAs(lp, dt, dyl)
					k.f(lowInPlace, lowInPlace, xl)
					same(c, k.name+" into "+dt.String()+" in place", c.down(lowInPlace), roundTo(dt, c.down(want16)))
				}
				for _, k := range []struct {
					name string
					f    func(y, x kernels.Buffer)
				}{{"ReLU", c.be.ReLU}, {"GELU", c.be.GELU}} {
					want, got := c.up(make([]float32, n)), c.up(make([]float32, n))
					k.f(want, c.up(x))
					k.f(got, c.upAs(lp, dt, x))
					same(c, k.name, c.down(got), c.down(want))
					// a 16-bit output: the fp32 result rounded once
					out := lp.AllocAs(n, dt)
					k.f(out, c.upAs(lp, dt, x))
					same(c, k.name+" into "+dt.String(), c.down(out), roundTo(dt, c.down(want)))
				}
			})
		}
		for _, sz := range [][2]int{{1, 1}, {7, 33}, {33, 1000}} {
			rows, cols := sz[0], sz[1]
			s.run(fmt.Sprintf("%v/LayerNormBackward/%dx%d", dt, rows, cols), func(c *tcase) {
				x, gamma, beta := c.layerNormInputs(rows, cols)
				x = roundTo(dt, x)
				y, mean, rstd := c.up(make([]float32, rows*cols)), c.up(make([]float32, rows)), c.up(make([]float32, rows))
				c.be.LayerNorm(y, mean, rstd, c.up(x), c.up(gamma), c.up(beta), 1e-5)
				dy, g0, b0 := c.randn(rows*cols, 0, 1), c.randn(cols, 0, 1), c.randn(cols, 0, 1)
				run := func(xb kernels.Buffer) (dx, dg, db []float32) {
					dxb, dgb, dbb := c.up(make([]float32, rows*cols)), c.up(g0), c.up(b0)
					c.be.LayerNormBackward(dxb, dgb, dbb, c.up(dy), xb, mean, rstd, c.up(gamma))
					return c.down(dxb), c.down(dgb), c.down(dbb)
				}
				wx, wg, wb := run(c.up(x))
				gx, gg, gb := run(c.upAs(lp, dt, x))
				same(c, "dx", gx, wx)
				same(c, "dgamma", gg, wg)
				same(c, "dbeta", gb, wb)
			})
		}
		for _, sz := range [][2]int{{1, 1}, {3, 5}, {33, 130}, {1000, 64}, {9, 1000}} {
			rows, cols := sz[0], sz[1]
			s.run(fmt.Sprintf("%v/SumRows/%dx%d", dt, rows, cols), func(c *tcase) {
				x := roundTo(dt, c.randn(rows*cols, 0.5, 1))
				d0 := c.randn(cols, 0, 1)
				want, got := c.up(d0), c.up(d0)
				c.be.SumRows(want, c.up(x))
				c.be.SumRows(got, c.upAs(lp, dt, x))
				same(c, "dst", c.down(got), c.down(want))
			})
		}
		for _, sz := range [][2]int{{3, 5}, {64, 64}, {4, 700}} {
			rows, cols := sz[0], sz[1]
			s.run(fmt.Sprintf("%v/SoftmaxBackward/%dx%d", dt, rows, cols), func(c *tcase) {
				y := roundTo(dt, c.uniform(rows*cols, 0, 1))
				dy := c.randn(rows*cols, 0, 1)
				want, got := c.up(make([]float32, rows*cols)), c.up(make([]float32, rows*cols))
				c.be.SoftmaxBackward(want, c.up(dy), c.up(y), cols, 0.125)
				c.be.SoftmaxBackward(got, c.up(dy), c.upAs(lp, dt, y), cols, 0.125)
				same(c, "dx", c.down(got), c.down(want))
			})
		}
	}
}
