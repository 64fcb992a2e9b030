//go:build cuda

package cuda

import (
	"fmt"
	"slices"

	"github.com/troupe-ml/troupe/kernels"
)

// maxAxes is the most axes Transpose takes (kernels.Backend's limit, and the
// kernel's six dims and strides).
const maxAxes = 6

// transposePlan is a Transpose reduced to its simplest equivalent: size-1
// axes dropped and runs of source axes that stay adjacent and in order
// merged. dims[i] is destination axis i's size, strides[i] the source
// distance of one step along it.
type transposePlan struct {
	n             int
	dims, strides [maxAxes]int
}

// planTranspose checks shape and perm against n elements (panicking with a
// message naming the problem) and returns the plan.
func planTranspose(shape, perm []int, n int) transposePlan {
	if len(shape) != len(perm) {
		panic(fmt.Sprintf("kernels/cuda: Transpose: %d-axis shape with a %d-axis perm", len(shape), len(perm)))
	}
	if len(shape) > maxAxes {
		panic(fmt.Sprintf("kernels/cuda: Transpose: %d axes, at most %d", len(shape), maxAxes))
	}
	var seen [maxAxes]bool
	for _, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			panic(fmt.Sprintf("kernels/cuda: Transpose: perm %v is not a permutation of 0..%d", slices.Clone(perm), len(perm)-1))
		}
		seen[p] = true
	}
	total := 1
	for _, s := range shape {
		if s < 0 {
			panic(fmt.Sprintf("kernels/cuda: Transpose: negative size in shape %v", slices.Clone(shape)))
		}
		total *= s
	}
	if total != n {
		panic(fmt.Sprintf("kernels/cuda: Transpose: shape %v has %d elements, buffers have %d", slices.Clone(shape), total, n))
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

// Transpose implements kernels.Backend: one thread per destination element
// computes its source offset from the plan.
func (be *Backend) Transpose(dst, src kernels.Buffer, shape []int, perm []int) {
	d, s := be.buf("Transpose", dst), be.buf("Transpose", src)
	mustLen("Transpose", "src", s.n, d.n)
	pl := planTranspose(shape, perm, d.n)
	if d.n == 0 {
		return
	}
	args := []uint64{argInt(d.n), argInt(pl.n), d.arg(), s.arg()}
	for i := 0; i < maxAxes; i++ {
		args = append(args, argInt(max(1, pl.dims[i])))
	}
	for i := 0; i < maxAxes; i++ {
		args = append(args, argInt(pl.strides[i]))
	}
	be.launch1(kTranspose, d.n, args...)
}
