package cpu

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Embedding implements kernels.Backend. An id outside [0, rows of table)
// panics, naming the position and the id.
func (be *Backend) Embedding(y, table kernels.Buffer, ids kernels.Index) {
	be.embedding("Embedding", y, table, ids, 0, true)
}

// ShardEmbedding implements kernels.Backend: ids outside the shard gather
// zero rows.
func (be *Backend) ShardEmbedding(y, table kernels.Buffer, ids kernels.Index, lo int) {
	be.embedding("ShardEmbedding", y, table, ids, lo, false)
}

// embedding gathers the rows of a table that holds ids [lo, lo+rows);
// with check, an id outside it panics, else it gathers zeros.
func (be *Backend) embedding(op string, y, table kernels.Buffer, ids kernels.Index, lo int, check bool) {
	ys, ts, is := F(y), F(table), I(ids)
	if len(is) == 0 {
		mustLenOf(op, "y", len(ys), 0)
		return
	}
	d := rowsOf(op, "y", len(ys), len(is))
	rows := rowsOf(op, "table", len(ts), d)
	if check {
		checkIds(op, is, rows)
	}
	if be.serial(len(ys), grainSimple) {
		embedRows(ys, ts, is, d, rows, lo, 0, len(is))
		return
	}
	parallelFor(len(is), be.threads, rowGrain(grainSimple, d), func(a, b int) {
		embedRows(ys, ts, is, d, rows, lo, a, b)
	})
}

// embedRows gathers ids [a, b).
func embedRows(ys, ts []float32, is []int32, d, rows, lo, a, b int) {
	for i := a; i < b; i++ {
		dst := ys[i*d : (i+1)*d]
		if r := int(is[i]) - lo; r >= 0 && r < rows {
			copy(dst, ts[r*d:(r+1)*d])
		} else {
			clear(dst)
		}
	}
}

// EmbeddingBackward implements kernels.Backend. Repeated ids add into the
// same table row, so the split is over column ranges, not over ids: every
// goroutine walks all ids in order for its own columns. The ranges are
// multiples of 16 columns (a 64-byte cache line) so that goroutines do not
// write the same line.
func (be *Backend) EmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index) {
	be.embeddingBackward("EmbeddingBackward", dtable, dy, ids, 0, true)
}

// ShardEmbeddingBackward implements kernels.Backend: ids outside the shard
// add nowhere.
func (be *Backend) ShardEmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index, lo int) {
	be.embeddingBackward("ShardEmbeddingBackward", dtable, dy, ids, lo, false)
}

func (be *Backend) embeddingBackward(op string, dtable, dy kernels.Buffer, ids kernels.Index, lo int, check bool) {
	ts, dys, is := F(dtable), F(dy), I(ids)
	if len(is) == 0 {
		mustLenOf(op, "dy", len(dys), 0)
		return
	}
	d := rowsOf(op, "dy", len(dys), len(is))
	rows := rowsOf(op, "dtable", len(ts), d)
	if check {
		checkIds(op, is, rows)
	}
	const line = 16
	lines := (d + line - 1) / line
	if be.serial(len(dys), grainSimple) || lines < 2 {
		embedGrads(ts, dys, is, d, rows, lo, 0, d)
		return
	}
	parallelFor(lines, be.threads, 1, func(a, b int) {
		embedGrads(ts, dys, is, d, rows, lo, a*line, min(b*line, d))
	})
}

// embedGrads accumulates columns [c0, c1) of every id's row.
func embedGrads(ts, dys []float32, is []int32, d, rows, lo, c0, c1 int) {
	for i, id := range is {
		r := int(id) - lo
		if r < 0 || r >= rows {
			continue
		}
		dst, src := ts[r*d+c0:r*d+c1], dys[i*d+c0:i*d+c1]
		for j, v := range src {
			dst[j] += v
		}
	}
}

func checkIds(op string, ids []int32, vocab int) {
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			panic(fmt.Sprintf("kernels/cpu: %s: ids[%d] = %d outside the table's %d rows", op, i, id, vocab))
		}
	}
}
