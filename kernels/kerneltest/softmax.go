package kerneltest

import (
	"fmt"
	"math"
)

// Softmax tolerances share one error model. exp(a − max) with a formed in
// float32 from inputs of magnitude M carries the rounding of a (u·M
// absolute, so u·M relative after exp) plus a few ulp of exp; the
// normalising sum of n terms adds up to n·u relative. So a softmax value p
// is good to ((n+8)·u + 4u·M)·p, and a log-sum-exp to the same absolute.
// Probabilities below float32's normal range may also be off by tiny.

// testSoftmaxCrossEntropy covers losses alone and with the fused gradient,
// ignored (negative) targets, several gradScales, and logits of 1e4, which
// overflow exp without the max subtraction and must stay finite.
func testSoftmaxCrossEntropy(s *suite) {
	type kind struct {
		name   string
		sd     float64
		grad   bool
		gScale float32
	}
	kinds := []kind{{"loss", 2, false, 0}, {"grad", 2, true, 1}, {"grad-scaled", 2, true, 1.0 / 33}, {"large-logits", 1e4, true, 0.5}}
	for _, sh := range shapes {
		for _, k := range kinds {
			rows, cols := sh[0], sh[1]
			s.run(fmt.Sprintf("%s/%s", k.name, shapeName(rows, cols)), func(c *tcase) {
				c.crossEntropy(rows, cols, k.sd, k.grad, k.gScale)
			})
		}
	}
}

func (c *tcase) crossEntropy(rows, cols int, sd float64, grad bool, gradScale float32) {
	x := c.randn(rows*cols, 0, sd)
	targets := c.ids(rows, cols)
	// Every third row ignored (index −1 or −100, PyTorch's default).
	for r := 1; r < rows; r += 3 {
		targets[r] = int32(-1 - 99*(r%2))
	}
	if rows > 2 {
		// One row whose target dominates: loss ≈ 0, p_t ≈ 1.
		x[2*cols+int(targets[2])] = float32(60 * sd)
	}
	wantLoss, tolLoss := make([]float64, rows), make([]float64, rows)
	wantGrad, tolGrad := make([]float64, rows*cols), make([]float64, rows*cols)
	gs := math.Abs(float64(gradScale))
	for r := 0; r < rows; r++ {
		t := int(targets[r])
		if t < 0 {
			continue // loss and gradient rows are 0, exactly
		}
		xr := widen(x[r*cols : (r+1)*cols])
		loss, p := refCrossEntropy(xr, t)
		k := float64(cols+8)*u + 4*u*maxAbs(xr)
		wantLoss[r], tolLoss[r] = loss, k*(loss+1)
		for j := range p {
			onehot := 0.0
			if j == t {
				onehot = 1
			}
			wantGrad[r*cols+j] = (p[j] - onehot) * float64(gradScale)
			tolGrad[r*cols+j] = k*(p[j]+onehot)*gs + tiny
		}
	}
	losses := c.be.Alloc(rows)
	// Start from garbage: both outputs are overwritten, ignored rows too.
	c.be.Fill(losses, 9)
	if !grad {
		c.be.SoftmaxCrossEntropy(losses, nil, c.up(x), c.upIdx(targets), gradScale)
		c.check("losses", c.down(losses), wantLoss, tolLoss)
		return
	}
	dl := c.be.Alloc(rows * cols)
	c.be.Fill(dl, 9)
	c.be.SoftmaxCrossEntropy(losses, dl, c.up(x), c.upIdx(targets), gradScale)
	c.check("losses", c.down(losses), wantLoss, tolLoss)
	c.check("dlogits", c.down(dl), wantGrad, tolGrad)
}

func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// testArgmaxCorrect is a count: exact. Inputs are continuous random values,
// so rows have no ties (the interface does not say which of tied maxima
// wins); ignored targets never count.
func testArgmaxCorrect(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			x, targets := c.randn(rows*cols, 0, 1), c.ids(rows, cols)
			want := 0
			for r := 0; r < rows; r++ {
				best := 0
				for j := 1; j < cols; j++ {
					if x[r*cols+j] > x[r*cols+best] {
						best = j
					}
				}
				// Make about half the rows right on purpose.
				if r%2 == 0 {
					targets[r] = int32(best)
				}
				if r%5 == 4 {
					targets[r] = -1
					continue
				}
				if int(targets[r]) == best {
					want++
				}
			}
			if got := c.be.ArgmaxCorrect(c.up(x), c.upIdx(targets)); got != want {
				c.Errorf("ArgmaxCorrect = %d, want %d", got, want)
			}
		})
	}
}

// testCausalSoftmax: masked entries (j > i) are exactly 0; live ones follow
// the softmax error model with n = i+1 and M = max|scale·x|.
func testCausalSoftmax(s *suite) {
	type cs struct {
		batch, t int
		scale    float32
		sd       float64
	}
	for _, k := range []cs{{1, 1, 1, 1}, {3, 7, 1, 1}, {2, 33, 0.125, 4}, {1, 100, 1, 1000}, {16, 64, 0.25, 2}} {
		name := fmt.Sprintf("%dx%dx%d/scale=%g,sd=%g", k.batch, k.t, k.t, k.scale, k.sd)
		s.run(name, func(c *tcase) {
			x := c.randn(k.batch*k.t*k.t, 0, k.sd)
			want, tol := make([]float64, len(x)), make([]float64, len(x))
			for r := 0; r < k.batch*k.t; r++ {
				live := r%k.t + 1
				row := make([]float64, live)
				for j := range row {
					row[j] = float64(k.scale) * float64(x[r*k.t+j])
				}
				p := refSoftmax(row)
				kk := float64(live+8)*u + 4*u*maxAbs(row)
				for j, v := range p {
					want[r*k.t+j], tol[r*k.t+j] = v, kk*v+tiny
				}
			}
			y := c.be.Alloc(len(x))
			c.be.Fill(y, 9)
			c.be.CausalSoftmax(y, c.up(x), k.t, k.scale)
			c.check("y", c.down(y), want, tol)
		})
	}
}

// testSoftmaxBackward uses real softmax rows as y. dx = scale·y·(dy − Σ dy·y):
// the dot product of cols terms errs by cols·u·Σ|dy·y|, the difference and
// products by a few u: |scale·y|·(cols+8)·u·(Σ|dy·y| + |dy|).
func testSoftmaxBackward(s *suite) {
	for _, sh := range shapes {
		for _, scale := range []float32{1, 0.125} {
			rows, cols := sh[0], sh[1]
			s.run(fmt.Sprintf("%s/scale=%g", shapeName(rows, cols), scale), func(c *tcase) {
				x, dy := c.randn(rows*cols, 0, 2), c.randn(rows*cols, 0, 1)
				y := make([]float32, len(x))
				for r := 0; r < rows; r++ {
					copy(y[r*cols:], narrow(refSoftmax(widen(x[r*cols:(r+1)*cols]))))
				}
				want, tol := make([]float64, len(x)), make([]float64, len(x))
				for r := 0; r < rows; r++ {
					var dot, adot float64
					for j := 0; j < cols; j++ {
						i := r*cols + j
						dot += float64(dy[i]) * float64(y[i])
						adot += math.Abs(float64(dy[i]) * float64(y[i]))
					}
					for j := 0; j < cols; j++ {
						i := r*cols + j
						sy := math.Abs(float64(scale) * float64(y[i]))
						want[i] = float64(scale) * float64(y[i]) * (float64(dy[i]) - dot)
						tol[i] = sy * float64(cols+8) * u * (adot + math.Abs(float64(dy[i])))
					}
				}
				dx := c.be.Alloc(len(x))
				c.be.SoftmaxBackward(dx, c.up(dy), c.up(y), cols, scale)
				c.check("dx", c.down(dx), want, tol)
			})
		}
	}
}
