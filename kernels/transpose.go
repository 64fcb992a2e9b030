package kernels

import (
	"fmt"
	"slices"
)

// MaxAxes is the most axes Backend.Transpose takes.
const MaxAxes = 6

// TransposePlan is a Transpose reduced to its simplest equivalent: axes of
// size 1 dropped and runs of source axes that stay adjacent and in order
// merged, so that [B, T, H, D] → [B, H, T, D] becomes a batch of swaps with
// a contiguous inner copy of D. Dims[i] is the size of destination axis i
// (i < N); Strides[i] is the source element distance one step along it
// moves.
type TransposePlan struct {
	N             int
	Dims, Strides [MaxAxes]int
}

// PlanTranspose checks shape and perm against n elements and returns the
// plan, or an error naming what is wrong. Its messages format copies of
// shape and perm, so that a caller's literals do not escape to the heap.
func PlanTranspose(shape, perm []int, n int) (TransposePlan, error) {
	var pl TransposePlan
	if len(shape) != len(perm) {
		return pl, fmt.Errorf("%d-axis shape with a %d-axis perm", len(shape), len(perm))
	}
	if len(shape) > MaxAxes {
		return pl, fmt.Errorf("%d axes, at most %d", len(shape), MaxAxes)
	}
	var seen [MaxAxes]bool
	for _, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			return pl, fmt.Errorf("perm %v is not a permutation of 0..%d", slices.Clone(perm), len(perm)-1)
		}
		seen[p] = true
	}
	total := 1
	for _, s := range shape {
		if s < 0 {
			return pl, fmt.Errorf("negative size in shape %v", slices.Clone(shape))
		}
		total *= s
	}
	if total != n {
		return pl, fmt.Errorf("shape %v has %d elements, buffers have %d", slices.Clone(shape), total, n)
	}
	var srcStride [MaxAxes]int
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		srcStride[i] = st
		st *= shape[i]
	}
	for _, p := range perm {
		if shape[p] == 1 {
			continue
		}
		// Merge with the previous destination axis when it is the source
		// axis just before this one: together they are one longer axis.
		if pl.N > 0 && pl.Strides[pl.N-1] == srcStride[p]*shape[p] {
			pl.Dims[pl.N-1] *= shape[p]
			pl.Strides[pl.N-1] = srcStride[p]
			continue
		}
		pl.Dims[pl.N], pl.Strides[pl.N] = shape[p], srcStride[p]
		pl.N++
	}
	if pl.N == 0 {
		pl.Dims[0], pl.Strides[0], pl.N = 1, 1, 1
	}
	return pl, nil
}
