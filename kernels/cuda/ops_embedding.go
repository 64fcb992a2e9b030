//go:build cuda

package cuda

import "github.com/troupe-ml/troupe/kernels"

// Embedding implements kernels.Backend. Ids live on the device, so an id
// outside the table cannot be caught here: the kernel gathers zeros for it
// and the next Sync reports ErrBadIndex.
func (be *Backend) Embedding(y, table kernels.Buffer, ids kernels.Index) {
	be.embedding("Embedding", y, table, ids, 0, errCodeEmb)
}

// ShardEmbedding implements kernels.Backend: ids outside the shard gather
// zeros, and nothing is flagged.
func (be *Backend) ShardEmbedding(y, table kernels.Buffer, ids kernels.Index, lo int) {
	be.embedding("ShardEmbedding", y, table, ids, lo, 0)
}

// embedding gathers the rows of a table holding ids [lo, lo+rows); a
// non-zero errCode flags ids outside it as bad.
func (be *Backend) embedding(op string, y, table kernels.Buffer, ids kernels.Index, lo, errCode int) {
	ys, ts, is := be.buf(op, y), be.buf(op, table), be.ids(op, ids)
	if is.n == 0 {
		mustLen(op, "y", ys.n, 0)
		return
	}
	d := rowsOf(op, "y", ys.n, is.n)
	rows := rowsOf(op, "table", ts.n, d)
	if errCode != 0 {
		be.launch1(kCheckIds, is.n, argInt(is.n), argInt(rows), is.arg(), uint64(be.errFlag), uint64(errCode))
	}
	be.launch1(kEmbedding, ys.n, argInt(is.n), argInt(d), argInt(rows), argInt(lo), ys.arg(), ts.arg(), is.arg())
}

// EmbeddingBackward implements kernels.Backend. Each table value is owned by
// one thread that adds the rows of its id in id order: deterministic, and
// the same additions in the same order as the CPU backend.
func (be *Backend) EmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index) {
	be.embeddingBackward("EmbeddingBackward", dtable, dy, ids, 0, errCodeEmbBwd)
}

// ShardEmbeddingBackward implements kernels.Backend: ids outside the shard
// add nowhere.
func (be *Backend) ShardEmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index, lo int) {
	be.embeddingBackward("ShardEmbeddingBackward", dtable, dy, ids, lo, 0)
}

func (be *Backend) embeddingBackward(op string, dtable, dy kernels.Buffer, ids kernels.Index, lo, errCode int) {
	ts, dys, is := be.buf(op, dtable), be.buf(op, dy), be.ids(op, ids)
	if is.n == 0 {
		mustLen(op, "dy", dys.n, 0)
		return
	}
	d := rowsOf(op, "dy", dys.n, is.n)
	rows := rowsOf(op, "dtable", ts.n, d)
	if errCode != 0 {
		be.launch1(kCheckIds, is.n, argInt(is.n), argInt(rows), is.arg(), uint64(be.errFlag), uint64(errCode))
	}
	if d == 0 || rows == 0 {
		return
	}
	grid := [3]int{min(rows, be.maxRowBlocks), min((d+embBwdCols-1)/embBwdCols, be.info.maxGridY), 1}
	be.launch(kEmbeddingBackward, grid, [3]int{embBwdThreads, 1, 1},
		argInt(is.n), argInt(d), argInt(rows), argInt(lo), ts.arg(), dys.arg(), is.arg())
}
