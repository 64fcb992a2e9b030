package cpu

import (
	"github.com/troupe-ml/troupe/kernels"
)

// planTranspose is kernels.PlanTranspose, panicking on misuse.
func planTranspose(shape, perm []int, n int) kernels.TransposePlan {
	pl, err := kernels.PlanTranspose(shape, perm, n)
	if err != nil {
		panic("kernels/cpu: Transpose: " + err.Error())
	}
	return pl
}

// Transpose implements kernels.Backend. The destination is written in order,
// one innermost-axis row at a time; the split is over those rows.
func (be *Backend) Transpose(dst, src kernels.Buffer, shape []int, perm []int) {
	d, s := F(dst), F(src)
	mustLenOf("Transpose", "src", len(s), len(d))
	pl := planTranspose(shape, perm, len(d))
	if len(d) == 0 {
		return
	}
	inner := pl.Dims[pl.N-1]
	rows := len(d) / inner
	if be.serial(len(d), grainSimple) {
		transposeRows(d, s, pl, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, inner), func(lo, hi int) {
		transposeRows(d, s, pl, lo, hi)
	})
}

// transposeRows writes destination rows [lo, hi) (rows of the innermost
// destination axis), walking the outer axes with an odometer of digits.
func transposeRows(d, s []float32, pl kernels.TransposePlan, lo, hi int) {
	n := pl.N
	inner, istride := pl.Dims[n-1], pl.Strides[n-1]
	// Digits of row lo along the outer axes, and the source offset they
	// address.
	var digit [kernels.MaxAxes]int
	off := 0
	for i, rem := n-2, lo; i >= 0; i-- {
		digit[i] = rem % pl.Dims[i]
		rem /= pl.Dims[i]
		off += digit[i] * pl.Strides[i]
	}
	for r := lo; r < hi; r++ {
		out := d[r*inner : (r+1)*inner]
		if istride == 1 {
			copy(out, s[off:off+inner])
		} else {
			for k, o := 0, off; k < len(out); k, o = k+1, o+istride {
				out[k] = s[o]
			}
		}
		for i := n - 2; i >= 0; i-- {
			digit[i]++
			off += pl.Strides[i]
			if digit[i] < pl.Dims[i] {
				break
			}
			off -= digit[i] * pl.Strides[i]
			digit[i] = 0
		}
	}
}
