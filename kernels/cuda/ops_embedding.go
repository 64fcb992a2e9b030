//go:build cuda

package cuda

import "github.com/troupe-ml/troupe/kernels"

// Embedding implements kernels.Backend. Ids live on the device, so an id
// outside the table cannot be caught here: the kernel gathers zeros for it
// and the next Sync reports ErrBadIndex.
func (be *Backend) Embedding(y, table kernels.Buffer, ids kernels.Index) {
	const op = "Embedding"
	ys, ts, is := be.buf(op, y), be.buf(op, table), be.ids(op, ids)
	if is.n == 0 {
		mustLen(op, "y", ys.n, 0)
		return
	}
	d := rowsOf(op, "y", ys.n, is.n)
	vocab := rowsOf(op, "table", ts.n, d)
	be.launch1(kCheckIds, is.n, argInt(is.n), argInt(vocab), is.arg(), uint64(be.errFlag), errCodeEmb)
	be.launch1(kEmbedding, ys.n, argInt(is.n), argInt(d), argInt(vocab), ys.arg(), ts.arg(), is.arg())
}

// EmbeddingBackward implements kernels.Backend. Each table value is owned by
// one thread that adds the rows of its id in id order: deterministic, and
// the same additions in the same order as the CPU backend.
func (be *Backend) EmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index) {
	const op = "EmbeddingBackward"
	ts, dys, is := be.buf(op, dtable), be.buf(op, dy), be.ids(op, ids)
	if is.n == 0 {
		mustLen(op, "dy", dys.n, 0)
		return
	}
	d := rowsOf(op, "dy", dys.n, is.n)
	vocab := rowsOf(op, "dtable", ts.n, d)
	be.launch1(kCheckIds, is.n, argInt(is.n), argInt(vocab), is.arg(), uint64(be.errFlag), errCodeEmbBwd)
	if d == 0 || vocab == 0 {
		return
	}
	grid := [3]int{min(vocab, be.maxRowBlocks), min((d+embBwdCols-1)/embBwdCols, be.info.maxGridY), 1}
	be.launch(kEmbeddingBackward, grid, [3]int{embBwdThreads, 1, 1},
		argInt(is.n), argInt(d), argInt(vocab), ts.arg(), dys.arg(), is.arg())
}
