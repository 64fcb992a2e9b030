//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
)

// Sum implements kernels.Backend: per-block double partials, then one block
// adds them in index order. The grid, and so the order of every addition,
// depends on the length alone.
func (be *Backend) Sum(x kernels.Buffer) float64 {
	return be.reduce("Sum", x, false)
}

// SumSquares implements kernels.Backend.
func (be *Backend) SumSquares(x kernels.Buffer) float64 {
	return be.reduce("SumSquares", x, true)
}

func (be *Backend) reduce(op string, x kernels.Buffer, squares bool) float64 {
	xs := be.buf(op, x)
	if xs.n == 0 {
		return 0
	}
	parts := be.grid1(xs.n)
	be.launch(kReducePartial, [3]int{parts, 1, 1}, [3]int{blockThreads, 1, 1},
		argInt(xs.n), xs.arg(), argBool(squares), uint64(be.partials))
	be.launch(kReduceFinal, [3]int{1, 1, 1}, [3]int{blockThreads, 1, 1},
		argInt(parts), uint64(be.partials), uint64(be.reduceOut))
	var out float64
	be.dtoh(op, unsafe.Pointer(&out), be.reduceOut, 8)
	return out
}

// SumRows implements kernels.Backend: blocks of 32 columns, each column
// summed down the rows in double by 8 lanes and the lanes added in order;
// x fp32, bf16 or fp16.
func (be *Backend) SumRows(dst, x kernels.Buffer) {
	d, xs := be.buf("SumRows", dst), be.saved("SumRows", x)
	rows := rowsOf("SumRows", "x", xs.n, d.n)
	if d.n == 0 {
		return
	}
	be.launch(kSumRows, [3]int{be.colGrid(d.n), 1, 1}, [3]int{blockThreads, 1, 1},
		argInt(rows), argInt(d.n), d.arg(), xs.arg(), uint64(xs.dt))
}

// colGrid is the grid of the column-block kernels (32 columns a block).
func (be *Backend) colGrid(cols int) int {
	return max(1, min((cols+31)/32, be.maxRowBlocks))
}
