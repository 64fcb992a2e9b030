package kerneltest

import (
	"fmt"
	"math"
)

// testShardEmbedding is a gather: exact. Ids fall below, inside and past
// the shard [lo, lo+rows); outside ones give zero rows.
func testShardEmbedding(s *suite) {
	for _, sh := range embeddingShapes {
		n, rows, d := sh[0], sh[1], sh[2]
		for _, lo := range []int{0, 3} {
			s.run(fmt.Sprintf("%dx%dx%d/lo=%d", n, rows, d, lo), func(c *tcase) {
				table, ids := c.randn(rows*d, 0, 1), c.ids(n, lo+rows+2)
				want := make([]float64, n*d)
				for i, id := range ids {
					if r := int(id) - lo; r >= 0 && r < rows {
						copy(want[i*d:], widen(table[r*d:(r+1)*d]))
					}
				}
				y := c.be.Alloc(n * d)
				c.be.Fill(y, 9) // overwritten, the zero rows too
				c.be.ShardEmbedding(y, c.up(table), c.upIdx(ids), lo)
				c.check("y", c.down(y), want, exact(n*d))
			})
		}
	}
}

// testShardEmbeddingBackward accumulates the ids inside the shard onto a
// non-zero table, with EmbeddingBackward's tolerance; rows no id hits stay
// exact.
func testShardEmbeddingBackward(s *suite) {
	for _, sh := range embeddingShapes {
		n, rows, d := sh[0], sh[1], sh[2]
		const lo = 2
		s.run(fmt.Sprintf("%dx%dx%d/lo=%d", n, rows, d, lo), func(c *tcase) {
			t0, dy, ids := c.randn(rows*d, 0, 1), c.randn(n*d, 0, 1), c.ids(n, lo+rows+2)
			want, mag := widen(t0), absAll(widen(t0))
			hits := make([]int, rows)
			for i, id := range ids {
				r := int(id) - lo
				if r < 0 || r >= rows {
					continue
				}
				hits[r]++
				for j := 0; j < d; j++ {
					want[r*d+j] += float64(dy[i*d+j])
					mag[r*d+j] += math.Abs(float64(dy[i*d+j]))
				}
			}
			tol := make([]float64, len(want))
			for i := range tol {
				tol[i] = float64(hits[i/d]+1) * u * mag[i]
			}
			tb := c.up(t0)
			c.be.ShardEmbeddingBackward(tb, c.up(dy), c.upIdx(ids), lo)
			c.check("dtable", c.down(tb), want, tol)
		})
	}
}

// testRowMax is exact. The padding columns past valid hold values larger
// than any real one, so reading them shows; valid 0 gives −Inf.
func testRowMax(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		for _, valid := range []int{cols, cols / 2, 0} {
			s.run(fmt.Sprintf("%s/valid=%d", shapeName(rows, cols), valid), func(c *tcase) {
				x := c.randn(rows*cols, 0, 3)
				want := make([]float64, rows)
				for r := range rows {
					want[r] = math.Inf(-1)
					for j := range cols {
						if j >= valid {
							x[r*cols+j] = 1e30
							continue
						}
						want[r] = math.Max(want[r], float64(x[r*cols+j]))
					}
				}
				dst := c.be.Alloc(rows)
				c.be.RowMax(dst, c.up(x), valid)
				c.check("max", c.down(dst), want, exact(rows))
			})
		}
	}
}

// testShardCrossEntropy runs a whole vocabulary-parallel cross-entropy the
// way nn does, with the sums over shards done here in float32 as the
// all-reduce does: RowMax per shard, the maximum over shards,
// ShardLogitStats per shard, the sums, ShardCrossEntropy per shard. The
// losses and the gradient pieced together from the shards must match the
// whole-row reference within SoftmaxCrossEntropy's error model: the extra
// rounding of S float32 partial sums adds S·u relative to the normaliser,
// inside its (cols+8)·u. Vocabularies the shard count does not divide are
// padded, one of them so much that its last shard has no real column; the
// padding holds huge logits that must not leak into anything.
func testShardCrossEntropy(s *suite) {
	type cs struct{ rows, vocab, shards int }
	for _, k := range []cs{{1, 1, 1}, {7, 33, 2}, {5, 5, 4}, {33, 126, 4}, {64, 1000, 3}} {
		for _, grad := range []bool{false, true} {
			s.run(fmt.Sprintf("%dx%d/shards=%d/grad=%v", k.rows, k.vocab, k.shards, grad), func(c *tcase) {
				c.shardCrossEntropy(k.rows, k.vocab, k.shards, grad)
			})
		}
	}
}

func (c *tcase) shardCrossEntropy(rows, vocab, shards int, grad bool) {
	const gradScale = 0.25
	x := c.randn(rows*vocab, 0, 2)
	targets := c.ids(rows, vocab)
	for r := 1; r < rows; r += 3 {
		targets[r] = -1
	}
	wantLoss, tolLoss := make([]float64, rows), make([]float64, rows)
	wantGrad, tolGrad := make([]float64, rows*vocab), make([]float64, rows*vocab)
	for r := range rows {
		t := int(targets[r])
		if t < 0 {
			continue
		}
		xr := widen(x[r*vocab : (r+1)*vocab])
		loss, p := refCrossEntropy(xr, t)
		k := float64(vocab+8)*u + 4*u*maxAbs(xr)
		wantLoss[r], tolLoss[r] = loss, k*(loss+1)
		for j := range p {
			onehot := 0.0
			if j == t {
				onehot = 1
			}
			wantGrad[r*vocab+j] = (p[j] - onehot) * gradScale
			tolGrad[r*vocab+j] = k*(p[j]+onehot)*gradScale + tiny
		}
	}
	width := (vocab + shards - 1) / shards
	xs := make([][]float32, shards)
	for i := range xs {
		xs[i] = make([]float32, rows*width)
		for r := range rows {
			for j := range width {
				if v := i*width + j; v < vocab {
					xs[i][r*width+j] = x[r*vocab+v]
				} else {
					xs[i][r*width+j] = 1e30
				}
			}
		}
	}
	valid := func(i int) int { return min(max(vocab-i*width, 0), width) }
	tg := c.upIdx(targets)
	mx := make([]float32, rows)
	for r := range mx {
		mx[r] = float32(math.Inf(-1))
	}
	for i := range shards {
		m := c.be.Alloc(rows)
		c.be.RowMax(m, c.up(xs[i]), valid(i))
		for r, v := range c.down(m) {
			mx[r] = max(mx[r], v)
		}
	}
	sumExp, picked := make([]float32, rows), make([]float32, rows)
	for i := range shards {
		se, pk := c.be.Alloc(rows), c.be.Alloc(rows)
		c.be.ShardLogitStats(se, pk, c.up(xs[i]), c.up(mx), tg, i*width, valid(i))
		for r, v := range c.down(se) {
			sumExp[r] += v
		}
		for r, v := range c.down(pk) {
			picked[r] += v
		}
	}
	gotGrad := make([]float32, rows*vocab)
	for i := range shards {
		losses := c.be.Alloc(rows)
		c.be.Fill(losses, 9)
		var dl = c.be.Alloc(rows * width)
		c.be.Fill(dl, 9)
		if !grad {
			dl = nil
		}
		c.be.ShardCrossEntropy(losses, dl, c.up(xs[i]), c.up(mx), c.up(sumExp), c.up(picked), tg, i*width, valid(i), gradScale)
		// Every shard computes the same losses from the summed statistics.
		c.check(fmt.Sprintf("losses of shard %d", i), c.down(losses), wantLoss, tolLoss)
		if !grad {
			continue
		}
		d := c.down(dl)
		for r := range rows {
			for j := range width {
				v := i*width + j
				if v < vocab {
					gotGrad[r*vocab+v] = d[r*width+j]
				} else if d[r*width+j] != 0 {
					c.Errorf("shard %d: padding gradient [%d, %d] = %g, want 0", i, r, j, d[r*width+j])
				}
			}
		}
	}
	if grad {
		c.check("dlogits", gotGrad, wantGrad, tolGrad)
	}
}
