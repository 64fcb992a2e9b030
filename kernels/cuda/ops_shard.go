//go:build cuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// The shard kernels of a vocabulary-parallel cross-entropy, written as
// SoftmaxCrossEntropy is (ShardEmbedding shares Embedding's kernel).

// shardCols checks a shard kernel's logits against its rows and valid
// column count and returns the columns per row.
func shardCols(op string, xs *Buf, rows, valid int) int {
	cols := 0
	if rows > 0 {
		cols = rowsOf(op, "x", xs.n, rows)
	} else {
		mustLen(op, "x", xs.n, 0)
	}
	if valid < 0 || valid > cols {
		panic(fmt.Sprintf("kernels/cuda: %s: %d valid columns of rows of %d", op, valid, cols))
	}
	return cols
}

// RowMax implements kernels.Backend.
func (be *Backend) RowMax(dst, x kernels.Buffer, valid int) {
	const op = "RowMax"
	ds, xs := be.buf(op, dst), be.buf(op, x)
	rows := ds.n
	cols := shardCols(op, xs, rows, valid)
	be.launchRows(kRowMax, rows, argInt(rows), argInt(cols), argInt(valid), ds.arg(), xs.arg())
}

// ShardLogitStats implements kernels.Backend.
func (be *Backend) ShardLogitStats(sumExp, picked, x, mx kernels.Buffer, targets kernels.Index, lo, valid int) {
	const op = "ShardLogitStats"
	ss, ps, xs, ms, ts := be.buf(op, sumExp), be.buf(op, picked), be.buf(op, x), be.buf(op, mx), be.ids(op, targets)
	rows := ts.n
	mustLen(op, "sumExp", ss.n, rows)
	mustLen(op, "picked", ps.n, rows)
	mustLen(op, "mx", ms.n, rows)
	cols := shardCols(op, xs, rows, valid)
	be.launchRows(kShardLogitStats, rows, argInt(rows), argInt(cols), argInt(valid), argInt(lo),
		ss.arg(), ps.arg(), xs.arg(), ms.arg(), ts.arg())
}

// ShardCrossEntropy implements kernels.Backend.
func (be *Backend) ShardCrossEntropy(losses, dlogits, x, mx, sumExp, picked kernels.Buffer, targets kernels.Index, lo, valid int, gradScale float32) {
	const op = "ShardCrossEntropy"
	ls, xs, ms, ss, ps, ts := be.buf(op, losses), be.buf(op, x), be.buf(op, mx), be.buf(op, sumExp), be.buf(op, picked), be.ids(op, targets)
	rows := ts.n
	mustLen(op, "losses", ls.n, rows)
	mustLen(op, "mx", ms.n, rows)
	mustLen(op, "sumExp", ss.n, rows)
	mustLen(op, "picked", ps.n, rows)
	cols := shardCols(op, xs, rows, valid)
	ds := be.optBuf(op, dlogits)
	if ds != nil {
		mustLen(op, "dlogits", ds.n, xs.n)
	}
	be.launchRows(kShardXent, rows, argInt(rows), argInt(cols), argInt(valid), argInt(lo),
		ls.arg(), ds.arg(), xs.arg(), ms.arg(), ss.arg(), ps.arg(), ts.arg(), argF32(gradScale))
}
