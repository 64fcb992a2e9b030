package cpu

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/hostops"
)

// Mul implements kernels.Backend.
func (be *Backend) Mul(dst, a, b kernels.Buffer) {
	d, as, bs := F(dst), F(a), F(b)
	mustLenOf("Mul", "a", len(as), len(d))
	mustLenOf("Mul", "b", len(bs), len(d))
	if be.serial(len(d), grainSimple) {
		hostops.Mul(d, as, bs, 0, len(d))
		return
	}
	parallelFor(len(d), be.threads, grainSimple, func(lo, hi int) { hostops.Mul(d, as, bs, lo, hi) })
}

// CopyCols implements kernels.Backend.
func (be *Backend) CopyCols(dst kernels.Buffer, dstCols, dstOff int, src kernels.Buffer, srcCols, srcOff, cols int) {
	d, s := F(dst), F(src)
	rows, bad := hostops.CheckCols(len(d), dstCols, dstOff, len(s), srcCols, srcOff, cols)
	if bad != "" {
		panic(fmt.Sprintf("cpu: CopyCols: %s (dst %d values in rows of %d from %d, src %d in rows of %d from %d, %d columns)", bad, len(d), dstCols, dstOff, len(s), srcCols, srcOff, cols))
	}
	if be.serial(len(d), grainSimple) {
		hostops.CopyCols(d, dstCols, dstOff, s, srcCols, srcOff, cols, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		hostops.CopyCols(d, dstCols, dstOff, s, srcCols, srcOff, cols, lo, hi)
	})
}
