package cpu

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Embedding implements kernels.Backend. An id outside [0, rows of table)
// panics, naming the position and the id.
func (be *Backend) Embedding(y, table kernels.Buffer, ids kernels.Index) {
	ys, ts, is := F(y), F(table), I(ids)
	if len(is) == 0 {
		mustLenOf("Embedding", "y", len(ys), 0)
		return
	}
	d := rowsOf("Embedding", "y", len(ys), len(is))
	vocab := rowsOf("Embedding", "table", len(ts), d)
	checkIds("Embedding", is, vocab)
	if be.serial(len(ys), grainSimple) {
		embedding(ys, ts, is, d)
		return
	}
	parallelFor(len(is), be.threads, rowGrain(grainSimple, d), func(lo, hi int) {
		embedding(ys[lo*d:hi*d], ts, is[lo:hi], d)
	})
}

func embedding(y, table []float32, ids []int32, d int) {
	for i, id := range ids {
		copy(y[i*d:(i+1)*d], table[int(id)*d:int(id+1)*d])
	}
}

// EmbeddingBackward implements kernels.Backend. Repeated ids add into the
// same table row, so the split is over column ranges, not over ids: every
// goroutine walks all ids in order for its own columns. The ranges are
// multiples of 16 columns (a 64-byte cache line) so that goroutines do not
// write the same line.
func (be *Backend) EmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index) {
	ts, dys, is := F(dtable), F(dy), I(ids)
	if len(is) == 0 {
		mustLenOf("EmbeddingBackward", "dy", len(dys), 0)
		return
	}
	d := rowsOf("EmbeddingBackward", "dy", len(dys), len(is))
	vocab := rowsOf("EmbeddingBackward", "dtable", len(ts), d)
	checkIds("EmbeddingBackward", is, vocab)
	const line = 16
	lines := (d + line - 1) / line
	if be.serial(len(dys), grainSimple) || lines < 2 {
		embeddingBackward(ts, dys, is, d, 0, d)
		return
	}
	parallelFor(lines, be.threads, 1, func(lo, hi int) {
		embeddingBackward(ts, dys, is, d, lo*line, min(hi*line, d))
	})
}

// embeddingBackward accumulates columns [c0, c1) of every id's row.
func embeddingBackward(dtable, dy []float32, ids []int32, d, c0, c1 int) {
	for i, id := range ids {
		dst := dtable[int(id)*d+c0 : int(id)*d+c1]
		src := dy[i*d+c0 : i*d+c1]
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
