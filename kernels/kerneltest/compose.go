package kerneltest

import "math"

// testMul: one rounding of the exact product, u times its magnitude.
func testMul(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			a, b := c.randn(rows*cols, 0, 1), c.randn(rows*cols, 0.5, 2)
			want, tol := make([]float64, len(a)), make([]float64, len(a))
			for i := range a {
				want[i] = float64(a[i]) * float64(b[i])
				tol[i] = u * math.Abs(want[i])
			}
			d := c.be.Alloc(len(a))
			c.be.Mul(d, c.up(a), c.up(b))
			c.check("dst", c.down(d), want, tol)
			// In place: dst aliases a.
			x := c.up(a)
			c.be.Mul(x, x, c.up(b))
			c.check("dst=a", c.down(x), want, tol)
		})
	}
}

// testCopyCols concatenates two blocks of columns side by side and splits
// one back out: copies are exact, and the columns not written keep their
// values.
func testCopyCols(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		left, right := cols, cols/2+1
		wide := left + right + 1
		s.run(shapeName(rows, cols), func(c *tcase) {
			a, b, d0 := c.randn(rows*left, 0, 1), c.randn(rows*right, 0, 1), c.randn(rows*wide, 3, 1)
			want, tol := make([]float64, rows*wide), make([]float64, rows*wide)
			for r := range rows {
				for j := range wide {
					v := float64(d0[r*wide+j])
					switch {
					case j < left:
						v = float64(a[r*left+j])
					case j < left+right:
						v = float64(b[r*right+j-left])
					}
					want[r*wide+j] = v
				}
			}
			d := c.up(d0)
			c.be.CopyCols(d, wide, 0, c.up(a), left, 0, left)
			c.be.CopyCols(d, wide, left, c.up(b), right, 0, right)
			c.check("concat", c.down(d), want, tol)
			back := c.be.Alloc(rows * right)
			c.be.CopyCols(back, right, 0, d, wide, left, right)
			wantB, tolB := make([]float64, len(b)), make([]float64, len(b))
			for i, v := range b {
				wantB[i] = float64(v)
			}
			c.check("split", c.down(back), wantB, tolB)
		})
	}
}
