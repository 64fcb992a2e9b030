package cpu

import (
	"fmt"
	"slices"

	"github.com/troupe-ml/troupe/kernels"
)

// maxAxes is the most axes Transpose takes (kernels.Backend's limit).
const maxAxes = 6

// transposePlan is a Transpose reduced to its simplest equivalent: axes of
// size 1 dropped and runs of source axes that stay adjacent and in order
// merged, so that [B, T, H, D] → [B, H, T, D] becomes a batch of [T, H·…]
// swaps with a contiguous inner copy of D.
type transposePlan struct {
	n int
	// dims[i] is the size of destination axis i; strides[i] is the source
	// element distance that one step along it moves.
	dims, strides [maxAxes]int
}

// planTranspose checks shape and perm against n elements and returns the
// plan. Its panic messages format copies of shape and perm, so that the
// slices themselves do not escape and a caller's literals stay on its stack.
func planTranspose(shape, perm []int, n int) transposePlan {
	if len(shape) != len(perm) {
		panic(fmt.Sprintf("kernels/cpu: Transpose: %d-axis shape with a %d-axis perm", len(shape), len(perm)))
	}
	if len(shape) > maxAxes {
		panic(fmt.Sprintf("kernels/cpu: Transpose: %d axes, at most %d", len(shape), maxAxes))
	}
	var seen [maxAxes]bool
	for _, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			panic(fmt.Sprintf("kernels/cpu: Transpose: perm %v is not a permutation of 0..%d", slices.Clone(perm), len(perm)-1))
		}
		seen[p] = true
	}
	total := 1
	for _, s := range shape {
		if s < 0 {
			panic(fmt.Sprintf("kernels/cpu: Transpose: negative size in shape %v", slices.Clone(shape)))
		}
		total *= s
	}
	if total != n {
		panic(fmt.Sprintf("kernels/cpu: Transpose: shape %v has %d elements, buffers have %d", slices.Clone(shape), total, n))
	}
	var srcStride [maxAxes]int
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		srcStride[i] = st
		st *= shape[i]
	}
	var pl transposePlan
	for _, p := range perm {
		if shape[p] == 1 {
			continue
		}
		// Merge with the previous destination axis when it is the source
		// axis just before this one: together they are one longer axis.
		if pl.n > 0 && pl.strides[pl.n-1] == srcStride[p]*shape[p] {
			pl.dims[pl.n-1] *= shape[p]
			pl.strides[pl.n-1] = srcStride[p]
			continue
		}
		pl.dims[pl.n], pl.strides[pl.n] = shape[p], srcStride[p]
		pl.n++
	}
	if pl.n == 0 {
		pl.dims[0], pl.strides[0], pl.n = 1, 1, 1
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
	inner := pl.dims[pl.n-1]
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
func transposeRows(d, s []float32, pl transposePlan, lo, hi int) {
	n := pl.n
	inner, istride := pl.dims[n-1], pl.strides[n-1]
	// Digits of row lo along the outer axes, and the source offset they
	// address.
	var digit [maxAxes]int
	off := 0
	for i, rem := n-2, lo; i >= 0; i-- {
		digit[i] = rem % pl.dims[i]
		rem /= pl.dims[i]
		off += digit[i] * pl.strides[i]
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
			off += pl.strides[i]
			if digit[i] < pl.dims[i] {
				break
			}
			off -= digit[i] * pl.strides[i]
			digit[i] = 0
		}
	}
}
