//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
)

// Softmax-family kernels: one block per row, the maximum subtracted before
// exp, the normaliser summed in double.

// SoftmaxCrossEntropy implements kernels.Backend. A target at or beyond the
// class count gets loss 0 and a zero gradient row, and is reported by the
// next Sync (targets live on the device).
func (be *Backend) SoftmaxCrossEntropy(losses, dlogits, logits kernels.Buffer, targets kernels.Index, gradScale float32) {
	const op = "SoftmaxCrossEntropy"
	ls, xs, ts := be.buf(op, losses), be.buf(op, logits), be.ids(op, targets)
	rows := ts.n
	mustLen(op, "losses", ls.n, rows)
	cols := 0
	if rows > 0 {
		cols = rowsOf(op, "logits", xs.n, rows)
	} else {
		mustLen(op, "logits", xs.n, 0)
	}
	ds := be.optBuf(op, dlogits)
	if ds != nil {
		mustLen(op, "dlogits", ds.n, xs.n)
	}
	be.launchRows(kSoftmaxXent, rows, argInt(rows), argInt(cols), ls.arg(), ds.arg(), xs.arg(), ts.arg(), argF32(gradScale), uint64(be.errFlag))
}

// ArgmaxCorrect implements kernels.Backend (a sync point). A row's argmax is
// the first index of its largest value.
func (be *Backend) ArgmaxCorrect(logits kernels.Buffer, targets kernels.Index) int {
	const op = "ArgmaxCorrect"
	xs, ts := be.buf(op, logits), be.ids(op, targets)
	rows := ts.n
	if rows == 0 {
		mustLen(op, "logits", xs.n, 0)
		return 0
	}
	cols := rowsOf(op, "logits", xs.n, rows)
	be.memset(be.count, 0, countWords)
	be.launchRows(kArgmaxCorrect, rows, argInt(rows), argInt(cols), xs.arg(), ts.arg(), uint64(be.count), uint64(be.errFlag))
	var n int32
	be.dtoh(op, unsafe.Pointer(&n), be.count, 4)
	return int(n)
}

// CausalSoftmax implements kernels.Backend.
func (be *Backend) CausalSoftmax(y, x kernels.Buffer, t int, scale float32) {
	const op = "CausalSoftmax"
	ys, xs := be.buf(op, y), be.buf(op, x)
	mustLen(op, "y", ys.n, xs.n)
	rows := rowsOf(op, "x", xs.n, t)
	rowsOf(op, "x rows", rows, t)
	be.launchRows(kCausalSoftmax, rows, argInt(rows), argInt(t), ys.arg(), xs.arg(), argF32(scale))
}

// SoftmaxBackward implements kernels.Backend (y fp32, bf16 or fp16).
func (be *Backend) SoftmaxBackward(dx, dy, y kernels.Buffer, cols int, scale float32) {
	const op = "SoftmaxBackward"
	dxs, dys, ys := be.buf(op, dx), be.buf(op, dy), be.saved(op, y)
	mustLen(op, "dy", dys.n, dxs.n)
	mustLen(op, "y", ys.n, dxs.n)
	rows := rowsOf(op, "dx", dxs.n, cols)
	be.launchRows(kSoftmaxBackward, rows, argInt(rows), argInt(cols), dxs.arg(), dys.arg(), ys.arg(), argF32(scale), uint64(ys.dt))
}
