package cpu

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/troupe-ml/troupe/kernels"
)

// Softmax-family kernels. Every row subtracts its maximum before exp, so no
// exp overflows (logits of 1e4 are fine), and sums the exps in float64. Rows
// are independent, so splitting over rows does not change any result.

// SoftmaxCrossEntropy implements kernels.Backend. The loss is the log-sum-exp
// form, log Σ e^(x−max) − (x_t − max), which keeps its relative precision
// when the target dominates (loss near 0) and is finite for any finite
// logits.
func (be *Backend) SoftmaxCrossEntropy(losses, dlogits, logits kernels.Buffer, targets kernels.Index, gradScale float32) {
	ls, xs, ts := F(losses), F(logits), I(targets)
	rows := len(ts)
	mustLenOf("SoftmaxCrossEntropy", "losses", len(ls), rows)
	cols := 0
	if rows > 0 {
		cols = rowsOf("SoftmaxCrossEntropy", "logits", len(xs), rows)
	} else {
		mustLenOf("SoftmaxCrossEntropy", "logits", len(xs), 0)
	}
	var ds []float32
	if dlogits != nil {
		ds = F(dlogits)
		mustLenOf("SoftmaxCrossEntropy", "dlogits", len(ds), len(xs))
	}
	checkTargets("SoftmaxCrossEntropy", ts, cols)
	if be.serial(len(xs), grainExp) {
		softmaxCrossEntropy(ls, ds, xs, ts, cols, gradScale, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainExp, cols), func(lo, hi int) {
		softmaxCrossEntropy(ls, ds, xs, ts, cols, gradScale, lo, hi)
	})
}

// softmaxCrossEntropy does rows [lo, hi); ds is nil when no gradient is
// wanted.
func softmaxCrossEntropy(losses, ds, logits []float32, targets []int32, cols int, gradScale float32, lo, hi int) {
	for r := lo; r < hi; r++ {
		x := logits[r*cols : (r+1)*cols]
		t := int(targets[r])
		if t < 0 {
			losses[r] = 0
			if ds != nil {
				clear(ds[r*cols : (r+1)*cols])
			}
			continue
		}
		mx := rowMax(x)
		if ds == nil {
			s := rowExpSum(nil, x, mx)
			losses[r] = float32(math.Log(s) - float64(x[t]-mx))
			continue
		}
		d := ds[r*cols : (r+1)*cols]
		s := rowExpSum(d, x, mx)
		et := d[t]
		inv := float32(float64(gradScale) / s)
		for c := range d {
			d[c] *= inv
		}
		// p_t − 1 in float64: when the target dominates, p_t is close to 1
		// and the float32 product above has lost those bits.
		d[t] = float32((float64(et)/s - 1) * float64(gradScale))
		losses[r] = float32(math.Log(s) - float64(x[t]-mx))
	}
}

// expChunk is how many exps rowExpSum takes at a time: the size of its
// stack buffer when the caller wants no output.
const expChunk = 256

// rowExpSum returns Σ e^(x[c] − mx), writing the terms to d unless d is
// nil. It sums chunk by chunk in both cases, so the loss is the same bit for
// bit with and without a gradient.
func rowExpSum(d, x []float32, mx float32) float64 {
	var tmp [expChunk]float32
	var s float64
	for c := 0; c < len(x); c += expChunk {
		hi := min(c+expChunk, len(x))
		if d != nil {
			s += expSum(d[c:hi], x[c:hi], 1, mx)
		} else {
			s += expSum(tmp[:hi-c], x[c:hi], 1, mx)
		}
	}
	return s
}

// rowMax returns the largest value of x (skipping NaN, which then reaches
// the result through exp), or -Inf for an empty row.
func rowMax(x []float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		if v > mx {
			mx = v
		}
	}
	return mx
}

// scaledMax returns the largest scale·x[j] (skipping NaN), or -Inf for an
// empty row, keeping four running maxima so that the compares overlap.
func scaledMax(x []float32, scale float32) float32 {
	m0 := float32(math.Inf(-1))
	m1, m2, m3 := m0, m0, m0
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = max32(m0, scale*x[i])
		m1 = max32(m1, scale*x[i+1])
		m2 = max32(m2, scale*x[i+2])
		m3 = max32(m3, scale*x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max32(m0, scale*x[i])
	}
	return max32(max32(m0, m1), max32(m2, m3))
}

// max32 is a if b is not larger (so a NaN b is skipped), else b.
func max32(a, b float32) float32 {
	if b > a {
		return b
	}
	return a
}

// checkTargets panics on a target at or beyond cols; negative targets are
// ignored rows.
func checkTargets(op string, targets []int32, cols int) {
	for r, t := range targets {
		if int(t) >= cols {
			panic(fmt.Sprintf("kernels/cpu: %s: targets[%d] = %d, but rows have %d classes", op, r, t, cols))
		}
	}
}

// ArgmaxCorrect implements kernels.Backend. A row's argmax is the first
// index holding its largest value (torch.argmax's choice on ties); rows with
// a negative target never count.
func (be *Backend) ArgmaxCorrect(logits kernels.Buffer, targets kernels.Index) int {
	xs, ts := F(logits), I(targets)
	rows := len(ts)
	if rows == 0 {
		mustLenOf("ArgmaxCorrect", "logits", len(xs), 0)
		return 0
	}
	cols := rowsOf("ArgmaxCorrect", "logits", len(xs), rows)
	checkTargets("ArgmaxCorrect", ts, cols)
	if be.serial(len(xs), grainSimple) {
		return argmaxCorrect(xs, ts, cols, 0, rows)
	}
	var n atomic.Int64
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		n.Add(int64(argmaxCorrect(xs, ts, cols, lo, hi)))
	})
	return int(n.Load())
}

func argmaxCorrect(logits []float32, targets []int32, cols, lo, hi int) int {
	n := 0
	for r := lo; r < hi; r++ {
		t := int(targets[r])
		if t < 0 {
			continue
		}
		x := logits[r*cols : (r+1)*cols]
		best := 0
		for c, v := range x {
			if v > x[best] {
				best = c
			}
		}
		if best == t {
			n++
		}
	}
	return n
}

// CausalSoftmax implements kernels.Backend.
func (be *Backend) CausalSoftmax(y, x kernels.Buffer, t int, scale float32) {
	ys, xs := F(y), F(x)
	mustLenOf("CausalSoftmax", "y", len(ys), len(xs))
	rows := rowsOf("CausalSoftmax", "x", len(xs), t)
	rowsOf("CausalSoftmax", "x rows", rows, t)
	// Row i of each t×t matrix has i+1 live entries: t/2 on average.
	if be.serial(len(xs)/2, grainExp) {
		causalSoftmax(ys, xs, t, scale, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainExp, max(1, t/2)), func(lo, hi int) {
		causalSoftmax(ys, xs, t, scale, lo, hi)
	})
}

func causalSoftmax(y, x []float32, t int, scale float32, lo, hi int) {
	for r := lo; r < hi; r++ {
		live := r%t + 1
		xr, yr := x[r*t:r*t+live], y[r*t:(r+1)*t]
		mx := scaledMax(xr, scale)
		inv := float32(1 / expSum(yr[:live], xr, scale, mx))
		for j := range xr {
			yr[j] *= inv
		}
		clear(yr[live:])
	}
}

// SoftmaxBackward implements kernels.Backend. y may be bf16 or fp16 (a
// saved activation, widened as it is read).
func (be *Backend) SoftmaxBackward(dx, dy, y kernels.Buffer, cols int, scale float32) {
	dxs, dys, ys := F(dx), F(dy), savedOf(y)
	mustLenOf("SoftmaxBackward", "dy", len(dys), len(dxs))
	mustLenOf("SoftmaxBackward", "y", ys.Len(), len(dxs))
	rows := rowsOf("SoftmaxBackward", "dx", len(dxs), cols)
	if be.serial(len(dxs), grainSimple) {
		softmaxBackward(dxs, dys, ys, cols, scale, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		softmaxBackward(dxs, dys, ys, cols, scale, lo, hi)
	})
}

func softmaxBackward(dx, dy []float32, y saved, cols int, scale float32, lo, hi int) {
	var stack [wideRow]float32
	scratch := y.row(cols, stack[:])
	for r := lo; r < hi; r++ {
		dxr, dyr, yr := dx[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], y.at(r*cols, (r+1)*cols, scratch)
		d := float32(dot64(dyr, yr))
		for j, v := range yr {
			dxr[j] = scale * v * (dyr[j] - d)
		}
	}
}
