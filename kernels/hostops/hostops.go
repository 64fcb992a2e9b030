// Package hostops holds plain-Go float32 versions of the kernels the Llama
// layers need (RMSNorm, SwiGLU, rotary embeddings, a causal softmax with a
// position offset), written once and shared: the CPU backend runs them on
// its buffers, and a device backend without its own kernels for them runs
// them on host copies (kernels/cuda does, until kernels.cu has them).
//
// Row statistics accumulate in float64, as the CPU backend's LayerNorm does,
// so both callers produce the same bits. hostops imports nothing from troupe.
package hostops

import "math"

// RMSNorm writes y = x·rstd·w row by row, x and y [rows, len(w)], with
// rstd[r] = 1/sqrt(mean(x[r]²) + eps) (Llama's RMSNorm). The sum of squares
// runs in four float64 partial sums (columns 4j, 4j+1, …), so that it is not
// one chain of dependent additions.
func RMSNorm(y, rstd, x, w []float32, eps float32, lo, hi int) {
	cols := len(w)
	for r := lo; r < hi; r++ {
		xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		rs := float32(1 / math.Sqrt(sumSquares(xr)/float64(cols)+float64(eps)))
		rstd[r] = rs
		for c, v := range xr {
			yr[c] = w[c] * (v * rs)
		}
	}
}

// sumSquares is Σ x², in four float64 partial sums.
func sumSquares(x []float32) float64 {
	var s0, s1, s2, s3 float64
	c := 0
	for ; c+4 <= len(x); c += 4 {
		v := x[c : c+4 : c+4]
		a, b, d, e := float64(v[0]), float64(v[1]), float64(v[2]), float64(v[3])
		s0 += a * a
		s1 += b * b
		s2 += d * d
		s3 += e * e
	}
	for ; c < len(x); c++ {
		s0 += float64(x[c]) * float64(x[c])
	}
	return (s0 + s1) + (s2 + s3)
}

// RMSNormDx writes dx for rows [lo, hi): with g = dy·w,
// dx = rstd·g − x·rstd³·mean(g·x). The mean's sum runs as sumSquares'.
func RMSNormDx(dx, dy, x, rstd, w []float32, lo, hi int) {
	cols := len(w)
	for r := lo; r < hi; r++ {
		xr, dyr, dxr := x[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
		dot := dot3(dyr, w, xr)
		rs := float64(rstd[r])
		k := float32(rs * rs * rs * dot / float64(cols))
		rsf := float32(rs)
		for c, v := range xr {
			dxr[c] = rsf*(dyr[c]*w[c]) - k*v
		}
	}
}

// dot3 is Σ a·b·c over len(a) values, in float64, in four partial sums.
func dot3(a, b, c []float32) float64 {
	n := len(a)
	b, c = b[:n], c[:n]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += float64(a[i]) * float64(b[i]) * float64(c[i])
		s1 += float64(a[i+1]) * float64(b[i+1]) * float64(c[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2]) * float64(c[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3]) * float64(c[i+3])
	}
	for ; i < n; i++ {
		s0 += float64(a[i]) * float64(b[i]) * float64(c[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dwBlock is how many columns RMSNormDw sums at once: its float64
// accumulators live on the stack and rows are read in order.
const dwBlock = 64

// RMSNormDw accumulates dw[c] += Σ_r dy[r, c]·x[r, c]·rstd[r] for columns
// [lo, hi), in float64, over r in order. Rows are read one after another,
// dwBlock columns at a time, rather than a column at a time down the
// matrix.
func RMSNormDw(dw, dy, x, rstd []float32, lo, hi int) {
	cols := len(dw)
	var acc [dwBlock]float64
	for c0 := lo; c0 < hi; c0 += dwBlock {
		n := min(dwBlock, hi-c0)
		s := acc[:n]
		clear(s)
		for r, rs := range rstd {
			o := r*cols + c0
			dyr, xr := dy[o:o+n], x[o:o+n]
			for j := range s {
				s[j] += float64(dyr[j]) * float64(xr[j]*rs)
			}
		}
		for j, v := range s {
			dw[c0+j] = float32(float64(dw[c0+j]) + v)
		}
	}
}

// sigmoid is 1/(1+e^−g), computed in float64.
func sigmoid(g float32) float64 { return 1 / (1 + math.Exp(-float64(g))) }

// SwiGLU writes y = silu(gate)·up with silu(g) = g·σ(g), for [lo, hi).
func SwiGLU(y, gate, up []float32, lo, hi int) {
	for i := lo; i < hi; i++ {
		g := gate[i]
		y[i] = float32(float64(g)*sigmoid(g)) * up[i]
	}
}

// SwiGLUBackward writes dgate = dy·up·silu'(gate) and dup = dy·silu(gate)
// for [lo, hi), with silu'(g) = σ(g)·(1 + g·(1 − σ(g))). dgate and dup may
// alias gate and up: each element is read before it is written.
func SwiGLUBackward(dgate, dup, dy, gate, up []float32, lo, hi int) {
	for i := lo; i < hi; i++ {
		g, u, d := gate[i], up[i], dy[i]
		s := sigmoid(g)
		silu := float32(float64(g) * s)
		dsilu := float32(s * (1 + float64(g)*(1-s)))
		dgate[i] = d * u * dsilu
		dup[i] = d * silu
	}
}

// Rotary rotates rows [lo, hi) of x ([rows, cols], cols a multiple of
// headDim) into y, each head's first half against its second (Hugging
// Face's rotate_half): for i < headDim/2, with c = cos[r, i], s = sin[r, i],
// y[i] = x[i]·c − x[i+half]·s and y[i+half] = x[i+half]·c + x[i]·s. cos and
// sin are [rows, headDim/2]. y may be x.
func Rotary(y, x, cos, sin []float32, cols, headDim, lo, hi int) {
	half := headDim / 2
	for r := lo; r < hi; r++ {
		cr, sr := cos[r*half:(r+1)*half], sin[r*half:(r+1)*half]
		for h := r * cols; h < (r+1)*cols; h += headDim {
			for i := 0; i < half; i++ {
				a, b := x[h+i], x[h+i+half]
				y[h+i] = a*cr[i] - b*sr[i]
				y[h+i+half] = b*cr[i] + a*sr[i]
			}
		}
	}
}

// CausalSoftmaxFrom writes, for each of the rows [lo, hi) of x seen as
// [batch·rows, cols] with row index i = r mod rows, the softmax of
// scale·x over columns j ≤ pos0 + i, and 0 past them (the rows are the
// queries at positions pos0, pos0+1, … of a sequence whose first cols
// positions are the keys). Max and sum run in float64.
func CausalSoftmaxFrom(y, x []float32, rows, cols, pos0 int, scale float32, lo, hi int) {
	for r := lo; r < hi; r++ {
		xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		n := min(cols, pos0+r%rows+1)
		m := math.Inf(-1)
		for _, v := range xr[:n] {
			m = math.Max(m, float64(scale*v))
		}
		var s float64
		for j, v := range xr[:n] {
			e := math.Exp(float64(scale*v) - m)
			yr[j] = float32(e)
			s += e
		}
		for j := range n {
			yr[j] = float32(float64(yr[j]) / s)
		}
		for j := n; j < cols; j++ {
			yr[j] = 0
		}
	}
}

// Mul writes d[i] = a[i]·b[i] for i in [lo, hi).
func Mul(d, a, b []float32, lo, hi int) {
	for i := lo; i < hi; i++ {
		d[i] = a[i] * b[i]
	}
}

// CopyCols copies, for rows [lo, hi), cols columns of src (rows of
// srcCols) from column srcOff into dst (rows of dstCols) at column dstOff.
func CopyCols(dst []float32, dstCols, dstOff int, src []float32, srcCols, srcOff, cols, lo, hi int) {
	for r := lo; r < hi; r++ {
		copy(dst[r*dstCols+dstOff:r*dstCols+dstOff+cols], src[r*srcCols+srcOff:r*srcCols+srcOff+cols])
	}
}

// CheckCols validates CopyCols' shapes, returning the row count or an
// error message.
func CheckCols(dstLen, dstCols, dstOff, srcLen, srcCols, srcOff, cols int) (int, string) {
	switch {
	case dstCols <= 0 || srcCols <= 0 || cols < 0 || dstOff < 0 || srcOff < 0 || dstOff+cols > dstCols || srcOff+cols > srcCols:
		return 0, "columns out of range"
	case dstLen%dstCols != 0 || srcLen%srcCols != 0 || dstLen/dstCols != srcLen/srcCols:
		return 0, "row counts differ"
	}
	return dstLen / dstCols, ""
}
