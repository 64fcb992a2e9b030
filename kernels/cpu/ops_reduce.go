package cpu

import "github.com/troupe-ml/troupe/kernels"

// Reductions. They accumulate in float64 and combine partial sums in an
// order fixed by the input length alone, never by the thread count, so a
// result is the same bit for bit with 1 or 16 threads.

const (
	// sumChunks is the most pieces Sum and SumSquares cut their input into;
	// the pieces are summed independently and then added in index order.
	sumChunks = 64
	// sumChunkMin is the smallest piece worth a part of its own.
	sumChunkMin = 16 << 10
	// colBlock is the number of columns a column reduction keeps float64
	// accumulators for on the stack while it walks down the rows.
	colBlock = 64
)

// Sum implements kernels.Backend.
func (be *Backend) Sum(x kernels.Buffer) float64 {
	return be.reduce(F(x), sum64)
}

// SumSquares implements kernels.Backend.
func (be *Backend) SumSquares(x kernels.Buffer) float64 {
	return be.reduce(F(x), sumSquares64)
}

// reduce cuts x into nc = min(sumChunks, ⌈len/sumChunkMin⌉) pieces, sums
// each with f, and adds the piece sums in order. The pieces depend only on
// len(x), so the serial and the parallel path add the same numbers in the
// same order.
func (be *Backend) reduce(x []float32, f func([]float32) float64) float64 {
	n := len(x)
	nc := min(sumChunks, (n+sumChunkMin-1)/sumChunkMin)
	if be.serial(nc, 1) {
		var total float64
		for c := 0; c < nc; c++ {
			total += f(x[c*n/nc : (c+1)*n/nc])
		}
		return total
	}
	var parts [sumChunks]float64
	parallelFor(nc, be.threads, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			parts[c] = f(x[c*n/nc : (c+1)*n/nc])
		}
	})
	var total float64
	for _, p := range parts[:nc] {
		total += p
	}
	return total
}

// sum64 adds x in float64 with four independent accumulators, so that the
// additions overlap in the pipeline instead of waiting on one another.
func sum64(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSquares64 is sum64 of the squares; a float32 square is exact in float64.
func sumSquares64(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a, b, c, d := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		a := float64(x[i])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

// dot64 returns Σ a[i]·b[i] over len(a) in float64, with four accumulators
// like sum64 (a float32 product is exact in float64).
func dot64(a, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSqDev64 returns Σ (x[i] − m)² in float64, with four accumulators.
func sumSqDev64(x []float32, m float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d0, d1, d2, d3 := float64(x[i])-m, float64(x[i+1])-m, float64(x[i+2])-m, float64(x[i+3])-m
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(x); i++ {
		d := float64(x[i]) - m
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// SumRows implements kernels.Backend. The split is over blocks of columns:
// each column is summed down all rows by one goroutine, in row order, in
// float64, and then added to dst once.
// x may be bf16 or fp16 (a gradient kept in the compute type): its rows
// are widened piece by piece, the sums the same as its fp32 widening's.
func (be *Backend) SumRows(dst, x kernels.Buffer) {
	d, xs := F(dst), savedOf(x)
	cols := len(d)
	rowsOf("SumRows", "x", xs.Len(), cols)
	blocks := (cols + colBlock - 1) / colBlock
	if be.serial(xs.Len(), grainSimple) || blocks < 2 {
		sumRows(d, xs, 0, blocks)
		return
	}
	parallelFor(blocks, be.threads, 1, func(lo, hi int) { sumRows(d, xs, lo, hi) })
}

// sumRows accumulates the column sums of column blocks [blo, bhi).
func sumRows(dst []float32, x saved, blo, bhi int) {
	cols := len(dst)
	var acc [colBlock]float64
	var wide [wideBlock]float32
	for b := blo; b < bhi; b++ {
		c0, c1 := b*colBlock, min((b+1)*colBlock, cols)
		a := acc[:c1-c0]
		clear(a)
		rows := x.Len() / cols
		switch {
		case rows == 0:
		case !x.low():
			sumCols(a, x.f[c0:], rows, cols)
		default:
			// Widen the block's columns of a few rows at a time, packed
			// (stride c1 − c0), and add them in row order as above.
			w := c1 - c0
			per := len(wide) / w
			for r := 0; r < rows; r += per {
				k := min(per, rows-r)
				for i := range k {
					row := (r + i) * cols
					x.at(row+c0, row+c1, wide[i*w:(i+1)*w])
				}
				sumCols(a, wide[:k*w], k, w)
			}
		}
		for j, v := range a {
			dst[c0+j] = float32(float64(dst[c0+j]) + v)
		}
	}
}

// sumColsGo is sumCols's Go loop.
func sumColsGo(acc []float64, x []float32, rows, stride int) {
	for r := 0; r < rows; r++ {
		row := x[r*stride : r*stride+len(acc)]
		for j, v := range row {
			acc[j] += float64(v)
		}
	}
}
