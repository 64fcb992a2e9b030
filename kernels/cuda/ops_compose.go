//go:build cuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/hostops"
)

// Mul implements kernels.Backend on the host (see ops_llama.go).
func (be *Backend) Mul(dst, a, b kernels.Buffer) {
	const op = "Mul"
	h := be.host(op, a, b)
	mustLen(op, "b", len(h[1]), len(h[0]))
	mustLen(op, "dst", be.buf(op, dst).n, len(h[0]))
	d := make([]float32, len(h[0]))
	hostops.Mul(d, h[0], h[1], 0, len(d))
	be.Upload(dst, d)
}

// CopyCols implements kernels.Backend on the host (see ops_llama.go).
func (be *Backend) CopyCols(dst kernels.Buffer, dstCols, dstOff int, src kernels.Buffer, srcCols, srcOff, cols int) {
	const op = "CopyCols"
	h := be.host(op, dst, src)
	rows, bad := hostops.CheckCols(len(h[0]), dstCols, dstOff, len(h[1]), srcCols, srcOff, cols)
	if bad != "" {
		panic(fmt.Sprintf("cuda: CopyCols: %s", bad))
	}
	hostops.CopyCols(h[0], dstCols, dstOff, h[1], srcCols, srcOff, cols, 0, rows)
	be.Upload(dst, h[0])
}
