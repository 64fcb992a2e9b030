//go:build cuda

package cuda

import (
	"github.com/troupe-ml/troupe/kernels"
)

// planTranspose is kernels.PlanTranspose, panicking on misuse.
func planTranspose(shape, perm []int, n int) kernels.TransposePlan {
	pl, err := kernels.PlanTranspose(shape, perm, n)
	if err != nil {
		panic("kernels/cuda: Transpose: " + err.Error())
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
	args := []uint64{argInt(d.n), argInt(pl.N), d.arg(), s.arg()}
	for i := 0; i < kernels.MaxAxes; i++ {
		args = append(args, argInt(max(1, pl.Dims[i])))
	}
	for i := 0; i < kernels.MaxAxes; i++ {
		args = append(args, argInt(pl.Strides[i]))
	}
	be.launch1(kTranspose, d.n, args...)
}
