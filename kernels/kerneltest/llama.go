package kerneltest

import (
	"fmt"
	"math"
)

// The Llama kernels against float64 references. Tolerances follow the
// suite's model: a row reduction of n terms is good to (n+8)·u times the
// sum of the terms' magnitudes, an element-wise formula of a few roundings
// to 8·u times its terms' magnitudes.

// testRMSNorm compares y and rstd; the sum of squares of cols terms errs
// by (cols+8)·u relative at most, which rstd and y inherit (halved by the
// square root, kept whole here).
func testRMSNorm(s *suite) {
	const eps = 1e-6
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			x, w := c.randn(rows*cols, 0.5, 1.5), c.randn(cols, 1, 0.5)
			want, wantR := make([]float64, len(x)), make([]float64, rows)
			tol, tolR := make([]float64, len(x)), make([]float64, rows)
			k := float64(cols + 8)
			for r := range rows {
				var ss float64
				for _, v := range x[r*cols : (r+1)*cols] {
					ss += float64(v) * float64(v)
				}
				rs := 1 / math.Sqrt(ss/float64(cols)+eps)
				wantR[r], tolR[r] = rs, k*u*rs
				for j := range cols {
					i := r*cols + j
					want[i] = float64(w[j]) * float64(x[i]) * rs
					tol[i] = k * u * math.Abs(want[i])
				}
			}
			y, rstd := c.be.Alloc(len(x)), c.be.Alloc(rows)
			c.be.RMSNorm(y, rstd, c.up(x), c.up(w), eps)
			c.check("rstd", c.down(rstd), wantR, tolR)
			c.check("y", c.down(y), want, tol)
		})
	}
}

// testRMSNormBackward feeds float32 rstd (what the forward pass saves) and
// accumulates onto a non-zero dw. dx is rstd·g minus a row reduction of
// cols terms: (cols+8)·u·rstd·(|g| + |x|·rstd²·mean|g·x|); dw sums rows
// terms onto the old value: (rows+8)·u·(|old| + Σ|terms|).
func testRMSNormBackward(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			x, w := c.randn(rows*cols, 0.5, 1.5), c.randn(cols, 1, 0.5)
			dy, dw0 := c.randn(rows*cols, 0, 1), c.randn(cols, 0, 1)
			rstd := make([]float32, rows)
			for r := range rows {
				var ss float64
				for _, v := range x[r*cols : (r+1)*cols] {
					ss += float64(v) * float64(v)
				}
				rstd[r] = float32(1 / math.Sqrt(ss/float64(cols)+1e-6))
			}
			wantDx, tolDx := make([]float64, len(x)), make([]float64, len(x))
			wantDw, magDw := widen(dw0), absAll(widen(dw0))
			for r := range rows {
				rs := float64(rstd[r])
				var dot, mag float64
				for j := range cols {
					i := r*cols + j
					t := float64(dy[i]) * float64(w[j]) * float64(x[i])
					dot += t
					mag += math.Abs(t)
				}
				for j := range cols {
					i := r*cols + j
					g := float64(dy[i]) * float64(w[j])
					wantDx[i] = rs*g - float64(x[i])*rs*rs*rs*dot/float64(cols)
					tolDx[i] = float64(cols+8) * u * rs * (math.Abs(g) + math.Abs(float64(x[i]))*rs*rs*mag/float64(cols))
					t := float64(dy[i]) * float64(x[i]) * rs
					wantDw[j] += t
					magDw[j] += math.Abs(t)
				}
			}
			dx, dw := c.be.Alloc(len(x)), c.up(dw0)
			c.be.RMSNormBackward(dx, dw, c.up(dy), c.up(x), c.up(rstd), c.up(w))
			c.check("dx", c.down(dx), wantDx, tolDx)
			c.check("dw", c.down(dw), wantDw, rel(float64(rows+8), magDw))
		})
	}
}

func refSigmoid(g float64) float64 { return 1 / (1 + math.Exp(-g)) }

// testSwiGLU covers y and both gradients: a few roundings each, 8·u times
// the magnitude of the result's factors.
func testSwiGLU(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			g, up, dy := c.randn(n, 0, 3), c.randn(n, 0, 1), c.randn(n, 0, 1)
			want, wantDg, wantDu := make([]float64, n), make([]float64, n), make([]float64, n)
			tol, tolDg, tolDu := make([]float64, n), make([]float64, n), make([]float64, n)
			for i := range n {
				gi, ui, di := float64(g[i]), float64(up[i]), float64(dy[i])
				sg := refSigmoid(gi)
				silu := gi * sg
				want[i] = silu * ui
				wantDu[i] = di * silu
				ds := sg * (1 + gi*(1-sg))
				wantDg[i] = di * ui * ds
				tol[i] = 8 * u * math.Abs(want[i])
				tolDu[i] = 8 * u * math.Abs(wantDu[i])
				tolDg[i] = 8 * u * math.Abs(di*ui) * (sg + math.Abs(gi)*sg*(1-sg))
			}
			gb, ub := c.up(g), c.up(up)
			y := c.be.Alloc(n)
			c.be.SwiGLU(y, gb, ub)
			c.check("y", c.down(y), want, tol)
			// In place, as the MLP runs it: dgate over gate, dup over up.
			c.be.SwiGLUBackward(gb, ub, c.up(dy), gb, ub)
			c.check("dgate", c.down(gb), wantDg, tolDg)
			c.check("dup", c.down(ub), wantDu, tolDu)
		})
	}
}

// testRotary rotates heads of a few widths, in place and not; each output
// is a two-term sum: 4·u times the terms' magnitudes.
func testRotary(s *suite) {
	for _, sh := range [][3]int{{1, 1, 2}, {7, 3, 8}, {33, 4, 16}, {300, 8, 64}} {
		rows, heads, hd := sh[0], sh[1], sh[2]
		s.run(fmt.Sprintf("%dx%dx%d", rows, heads, hd), func(c *tcase) {
			cols, half := heads*hd, hd/2
			x := c.randn(rows*cols, 0, 1)
			cos, sin := make([]float32, rows*half), make([]float32, rows*half)
			for i := range cos {
				a := c.rng.Float64() * 100
				cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
			}
			want, tol := make([]float64, len(x)), make([]float64, len(x))
			for r := range rows {
				for h := range heads {
					for i := range half {
						p, q := r*cols+h*hd+i, r*cols+h*hd+i+half
						cr, sr := float64(cos[r*half+i]), float64(sin[r*half+i])
						a, b := float64(x[p]), float64(x[q])
						want[p], want[q] = a*cr-b*sr, b*cr+a*sr
						tol[p] = 4 * u * (math.Abs(a*cr) + math.Abs(b*sr))
						tol[q] = 4 * u * (math.Abs(b*cr) + math.Abs(a*sr))
					}
				}
			}
			cb, sb := c.up(cos), c.up(sin)
			y := c.be.Alloc(len(x))
			c.be.Rotary(y, c.up(x), cb, sb, hd)
			c.check("y", c.down(y), want, tol)
			xb := c.up(x)
			c.be.Rotary(xb, xb, cb, sb, hd)
			c.check("in-place", c.down(xb), want, tol)
		})
	}
}

// testCausalSoftmaxFrom checks square blocks (CausalSoftmax's case) and
// query rows past the start of the keys, with the softmax error model of
// softmax.go.
func testCausalSoftmaxFrom(s *suite) {
	for _, sh := range [][4]int{{1, 1, 1, 0}, {2, 5, 5, 0}, {3, 1, 9, 8}, {2, 4, 11, 7}, {1, 3, 40, 2}} {
		batch, rows, cols, pos0 := sh[0], sh[1], sh[2], sh[3]
		s.run(fmt.Sprintf("%dx%dx%d+%d", batch, rows, cols, pos0), func(c *tcase) {
			const scale = 0.7
			x := c.randn(batch*rows*cols, 0, 2)
			want, tol := make([]float64, len(x)), make([]float64, len(x))
			for r := range batch * rows {
				n := min(cols, pos0+r%rows+1)
				row := make([]float64, n)
				var mx float64
				for j := range n {
					row[j] = scale * float64(x[r*cols+j])
					mx = math.Max(mx, math.Abs(row[j]))
				}
				for j, p := range refSoftmax(row) {
					want[r*cols+j] = p
					tol[r*cols+j] = (float64(n+8)*u+4*u*mx)*p + tiny
				}
			}
			y := c.be.Alloc(len(x))
			c.be.CausalSoftmaxFrom(y, c.up(x), rows, cols, pos0, scale)
			c.check("y", c.down(y), want, tol)
		})
	}
}
