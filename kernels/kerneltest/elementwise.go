package kerneltest

import (
	"fmt"
	"math"
)

// Element-wise kernels and reductions.

// testAxpy: y + α·x is one product and one sum, each rounded once (or once
// in all with FMA): 2u·(|y| + |α·x|).
func testAxpy(s *suite) {
	for _, n := range lengths {
		for _, alpha := range []float32{1, -0.75, 0} {
			s.run(fmt.Sprintf("%d/alpha=%g", n, alpha), func(c *tcase) {
				x, y := c.randn(n, 0, 1), c.randn(n, 0, 1)
				want, mag := make([]float64, n), make([]float64, n)
				for i := range want {
					want[i] = float64(y[i]) + float64(alpha)*float64(x[i])
					mag[i] = math.Abs(float64(y[i])) + math.Abs(float64(alpha)*float64(x[i]))
				}
				yb := c.up(y)
				c.be.Axpy(alpha, c.up(x), yb)
				c.check("y", c.down(yb), want, rel(2, mag))
			})
		}
	}
}

// testScale: one rounded product, u·|α·x|.
func testScale(s *suite) {
	for _, n := range lengths {
		for _, alpha := range []float32{3.5, -1e-3, 0} {
			s.run(fmt.Sprintf("%d/alpha=%g", n, alpha), func(c *tcase) {
				x := c.randn(n, 0, 1)
				want := make([]float64, n)
				for i := range want {
					want[i] = float64(alpha) * float64(x[i])
				}
				xb := c.up(x)
				c.be.Scale(xb, alpha)
				c.check("x", c.down(xb), want, rel(1, absAll(want)))
			})
		}
	}
}

// testAdd: one rounded sum, u·|a + b|; dst may alias either input.
func testAdd(s *suite) {
	for _, n := range lengths {
		for _, alias := range []string{"none", "a", "b"} {
			s.run(fmt.Sprintf("%d/alias=%s", n, alias), func(c *tcase) {
				a, b := c.randn(n, 0, 1), c.randn(n, 0, 1)
				want := make([]float64, n)
				for i := range want {
					want[i] = float64(a[i]) + float64(b[i])
				}
				ab, bb := c.up(a), c.up(b)
				dst := c.be.Alloc(n)
				switch alias {
				case "a":
					dst = ab
				case "b":
					dst = bb
				}
				c.be.Add(dst, ab, bb)
				c.check("dst", c.down(dst), want, rel(1, absAll(want)))
			})
		}
	}
}

// testAddBias: one rounded sum per element, u·|y + bias|.
func testAddBias(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			y, bias := c.randn(rows*cols, 0, 1), c.randn(cols, 0, 1)
			want := make([]float64, rows*cols)
			for i := range want {
				want[i] = float64(y[i]) + float64(bias[i%cols])
			}
			yb := c.up(y)
			c.be.AddBias(yb, c.up(bias))
			c.check("y", c.down(yb), want, rel(1, absAll(want)))
		})
	}
}

// testSumRows accumulates onto a non-zero dst. A column sum of rows terms
// plus the old value errs by at most (rows+1)·u·Σ|terms| summed in float32
// (less in float64, as the CPU backend does).
func testSumRows(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			x, d0 := c.randn(rows*cols, 0.5, 1), c.randn(cols, 0, 1)
			want, mag := widen(d0), absAll(widen(d0))
			for i, v := range x {
				want[i%cols] += float64(v)
				mag[i%cols] += math.Abs(float64(v))
			}
			db := c.up(d0)
			c.be.SumRows(db, c.up(x))
			c.check("dst", c.down(db), want, rel(float64(rows+1), mag))
		})
	}
}

// testSum and testSumSquares return float64. A float64 accumulation is
// exact to far below u; 4u·Σ|terms| admits a float32 pairwise or blocked
// reduction as well, and rejects a float32 running sum over the long inputs
// (whose error grows like n·u) as well as any dropped or repeated element.
// The inputs have a mean of 1, so Σ|terms| ≈ |Σ terms| and the bound is
// tight.
func testSum(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			x := c.randn(n, 1, 0.5)
			var want, mag float64
			for _, v := range x {
				want += float64(v)
				mag += math.Abs(float64(v))
			}
			got := c.be.Sum(c.up(x))
			if math.Abs(got-want) > 4*u*mag {
				c.Errorf("Sum = %.17g, want %.17g (|diff| %.3g > tol %.3g)", got, want, math.Abs(got-want), 4*u*mag)
			}
		})
	}
}

func testSumSquares(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			x := c.randn(n, 1, 0.5)
			var want float64
			for _, v := range x {
				want += float64(v) * float64(v)
			}
			got := c.be.SumSquares(c.up(x))
			if math.Abs(got-want) > 4*u*want {
				c.Errorf("SumSquares = %.17g, want %.17g (|diff| %.3g > tol %.3g)", got, want, math.Abs(got-want), 4*u*want)
			}
		})
	}
}

// activationInputs are n values spread over [-8, 8], where GELU's shape
// lives, with exact zeros and a few far-out values mixed in.
func (c *tcase) activationInputs(n int) []float32 {
	x := c.uniform(n, -8, 8)
	negZero := float32(math.Copysign(0, -1))
	for i, v := range []float32{0, negZero, 1e-3, -1e-3, 40, -40, -12, 12} {
		if i < n {
			x[(i*7919)%n] = v
		}
	}
	return x
}

// testReLU and testReLUBackward are exact: they only select values.
func testReLU(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			x := c.activationInputs(n)
			want := make([]float64, n)
			for i, v := range x {
				want[i] = math.Max(float64(v), 0)
			}
			y := c.be.Alloc(n)
			c.be.ReLU(y, c.up(x))
			c.check("y", c.down(y), want, exact(n))
		})
	}
}

func testReLUBackward(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			x, dy := c.activationInputs(n), c.randn(n, 0, 1)
			want := make([]float64, n)
			for i, v := range x {
				if v > 0 {
					want[i] = float64(dy[i])
				}
			}
			dx := c.be.Alloc(n)
			c.be.ReLUBackward(dx, c.up(dy), c.up(x))
			c.check("dx", c.down(dx), want, exact(n))
		})
	}
}

// testGELU compares with x·Φ(x) from float64 math.Erfc. A float32 erf is
// good to a few ulp, but 1 + erf(x/√2) cancels for x ≪ 0, leaving an error of
// about u absolute in Φ and so u·|x| in y; PyTorch's own vectorised CPU erf
// has 1.5e-7 = 1.3u absolute error. Tolerance: 16u·|y| + 4u·|x|.
func testGELU(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			x := c.activationInputs(n)
			want, tol := make([]float64, n), make([]float64, n)
			for i, v := range x {
				want[i] = refGELU(float64(v))
				tol[i] = 16*u*math.Abs(want[i]) + 4*u*math.Abs(float64(v))
			}
			y := c.be.Alloc(n)
			c.be.GELU(y, c.up(x))
			c.check("y", c.down(y), want, tol)
		})
	}
}

// testGELUBackward: dy·(Φ(x) + x·φ(x)); as for GELU, Φ may carry u absolute
// error and the rest a few ulp: |dy|·(16u·(Φ + |x|·φ) + 4u).
func testGELUBackward(s *suite) {
	for _, n := range lengths {
		s.run(fmt.Sprint(n), func(c *tcase) {
			x, dy := c.activationInputs(n), c.randn(n, 0, 1)
			want, tol := make([]float64, n), make([]float64, n)
			for i, v := range x {
				xv, d := float64(v), math.Abs(float64(dy[i]))
				want[i] = float64(dy[i]) * refGELUGrad(xv)
				tol[i] = d * (16*u*(phi(xv)+math.Abs(xv)*pdf(xv)) + 4*u)
			}
			dx := c.be.Alloc(n)
			c.be.GELUBackward(dx, c.up(dy), c.up(x))
			c.check("dx", c.down(dx), want, tol)
		})
	}
}

// absAll returns |v[i]| for each i.
func absAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}
