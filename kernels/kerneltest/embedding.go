package kerneltest

import (
	"fmt"
	"math"
)

// embeddingShapes are (ids, vocab, d): one id, more ids than rows (so ids
// repeat), odd widths, and one large enough to split.
var embeddingShapes = [][3]int{{1, 1, 1}, {7, 3, 33}, {33, 100, 7}, {1000, 50, 64}, {2048, 300, 129}}

func (c *tcase) ids(n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(c.rng.IntN(vocab))
	}
	return ids
}

// testEmbedding is a gather: exact.
func testEmbedding(s *suite) {
	for _, sh := range embeddingShapes {
		n, vocab, d := sh[0], sh[1], sh[2]
		s.run(fmt.Sprintf("%dx%dx%d", n, vocab, d), func(c *tcase) {
			table, ids := c.randn(vocab*d, 0, 1), c.ids(n, vocab)
			want := make([]float64, 0, n*d)
			for _, id := range ids {
				want = append(want, widen(table[int(id)*d:int(id+1)*d])...)
			}
			y := c.be.Alloc(n * d)
			c.be.Embedding(y, c.up(table), c.upIdx(ids))
			c.check("y", c.down(y), want, exact(n*d))
		})
	}
}

// testEmbeddingBackward accumulates onto a non-zero table, with repeated
// ids: a row hit k times is a sum of k+1 terms, (k+1)·u·Σ|terms| (k+1 for
// the old value, the bound of a float32 running sum in any order).
func testEmbeddingBackward(s *suite) {
	for _, sh := range embeddingShapes {
		n, vocab, d := sh[0], sh[1], sh[2]
		s.run(fmt.Sprintf("%dx%dx%d", n, vocab, d), func(c *tcase) {
			t0, dy, ids := c.randn(vocab*d, 0, 1), c.randn(n*d, 0, 1), c.ids(n, vocab)
			want, mag := widen(t0), absAll(widen(t0))
			hits := make([]int, vocab)
			for i, id := range ids {
				hits[id]++
				for j := 0; j < d; j++ {
					want[int(id)*d+j] += float64(dy[i*d+j])
					mag[int(id)*d+j] += math.Abs(float64(dy[i*d+j]))
				}
			}
			tol := make([]float64, len(want))
			for i := range tol {
				tol[i] = float64(hits[i/d]+1) * u * mag[i]
			}
			tb := c.up(t0)
			c.be.EmbeddingBackward(tb, c.up(dy), c.upIdx(ids))
			c.check("dtable", c.down(tb), want, tol)
		})
	}
}
