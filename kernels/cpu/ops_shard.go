package cpu

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// The shard kernels are a vocabulary-parallel cross-entropy's per-shard
// parts (Megatron-LM's vocab_parallel_cross_entropy; ShardEmbedding shares
// Embedding's code). They follow the whole-row kernels: sums of exps in
// float64, p_t − 1 in float64, rows independent.

// shardCols checks a shard kernel's logits against its rows and valid
// column count and returns the columns per row.
func shardCols(op string, xs []float32, rows, valid int) int {
	cols := 0
	if rows > 0 {
		cols = rowsOf(op, "x", len(xs), rows)
	} else {
		mustLenOf(op, "x", len(xs), 0)
	}
	if valid < 0 || valid > cols {
		panic(fmt.Sprintf("kernels/cpu: %s: %d valid columns of rows of %d", op, valid, cols))
	}
	return cols
}

// RowMax implements kernels.Backend.
func (be *Backend) RowMax(dst, x kernels.Buffer, valid int) {
	ds, xs := F(dst), F(x)
	rows := len(ds)
	cols := shardCols("RowMax", xs, rows, valid)
	body := func(a, b int) {
		for r := a; r < b; r++ {
			ds[r] = rowMax(xs[r*cols : r*cols+valid])
		}
	}
	if be.serial(len(xs), grainSimple) {
		body(0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), body)
}

// ShardLogitStats implements kernels.Backend.
func (be *Backend) ShardLogitStats(sumExp, picked, x, mx kernels.Buffer, targets kernels.Index, lo, valid int) {
	ss, ps, xs, ms, ts := F(sumExp), F(picked), F(x), F(mx), I(targets)
	rows := len(ts)
	const op = "ShardLogitStats"
	mustLenOf(op, "sumExp", len(ss), rows)
	mustLenOf(op, "picked", len(ps), rows)
	mustLenOf(op, "mx", len(ms), rows)
	cols := shardCols(op, xs, rows, valid)
	body := func(a, b int) {
		for r := a; r < b; r++ {
			t := int(ts[r])
			if t < 0 {
				ss[r], ps[r] = 0, 0
				continue
			}
			row := xs[r*cols : r*cols+valid]
			ss[r] = float32(rowExpSum(nil, row, ms[r]))
			ps[r] = 0
			if j := t - lo; j >= 0 && j < valid {
				ps[r] = row[j] - ms[r]
			}
		}
	}
	if be.serial(len(xs), grainExp) {
		body(0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainExp, cols), body)
}

// ShardCrossEntropy implements kernels.Backend.
func (be *Backend) ShardCrossEntropy(losses, dlogits, x, mx, sumExp, picked kernels.Buffer, targets kernels.Index, lo, valid int, gradScale float32) {
	ls, xs, ms, ss, ps, ts := F(losses), F(x), F(mx), F(sumExp), F(picked), I(targets)
	rows := len(ts)
	const op = "ShardCrossEntropy"
	for _, b := range []struct {
		name string
		n    int
	}{{"losses", len(ls)}, {"mx", len(ms)}, {"sumExp", len(ss)}, {"picked", len(ps)}} {
		mustLenOf(op, b.name, b.n, rows)
	}
	cols := shardCols(op, xs, rows, valid)
	var ds []float32
	if dlogits != nil {
		ds = F(dlogits)
		mustLenOf(op, "dlogits", len(ds), len(xs))
	}
	body := func(a, b int) {
		for r := a; r < b; r++ {
			t := int(ts[r])
			if t < 0 {
				ls[r] = 0
				if ds != nil {
					clear(ds[r*cols : (r+1)*cols])
				}
				continue
			}
			s := float64(ss[r])
			ls[r] = float32(math.Log(s) - float64(ps[r]))
			if ds == nil {
				continue
			}
			d := ds[r*cols : (r+1)*cols]
			rowExpSum(d[:valid], xs[r*cols:r*cols+valid], ms[r])
			j := t - lo
			var et float32
			if j >= 0 && j < valid {
				et = d[j]
			}
			inv := float32(float64(gradScale) / s)
			for c := range d[:valid] {
				d[c] *= inv
			}
			clear(d[valid:])
			if j >= 0 && j < valid {
				// p_t − 1 in float64, as in SoftmaxCrossEntropy.
				d[j] = float32((float64(et)/s - 1) * float64(gradScale))
			}
		}
	}
	if be.serial(len(xs), grainExp) {
		body(0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainExp, cols), body)
}
