package nn

import "github.com/troupe-ml/troupe/kernels"

// projections are bias-free linear maps that read one input: q, k and v of
// LlamaAttention, gate and up of SwiGLUMLP. The input is kept once for all
// of them and their input gradients are summed into one, so that a
// tensor-parallel model opens one column-parallel region for them all:
// one all-reduce of dx backward (or, with sequence parallelism, one
// all-gather forward and one reduce-scatter backward), where a Linear each
// would make one per map.
//
// A map may be a column-parallel slice (its Linear holds the shard's
// outputs) or replicated whole on every shard (k and v when the shards
// cannot split the kv heads): either way each shard's dx is a part of the
// whole input gradient, and the region's all-reduce sums the parts.
//
// A map may also compute a window of its outputs only, rows [lo, lo+n) of
// its weight: a replicated k_proj whose shard needs some kv heads of all.
// The rows outside get no gradient on that shard.
type projections struct {
	ls []*Linear
	// win[i], when set, is map i's window {lo, n} in output rows.
	win map[int][2]int
	tp  TP
}

// window returns map i's first output row and count.
func (p *projections) window(i int) (lo, n int) {
	if w, ok := p.win[i]; ok {
		return w[0], w[1]
	}
	return 0, p.ls[i].Out
}

// rowsOf returns map i's rows of a weight-shaped buffer (W, its compute copy,
// or G).
func (p *projections) rowsOf(c *Ctx, i int, b kernels.Buffer) kernels.Buffer {
	lo, n := p.window(i)
	in := p.ls[i].In
	return c.Be.View(b, lo*in, n*in)
}

// newColumnNoBias registers a bias-free Linear in → out whose outputs t
// cuts into t.Size slices (newColumn without the bias).
func newColumnNoBias(s *ParamSet, prefix string, in, out int, t TP, init Init) *Linear {
	if !t.On() {
		return &Linear{In: in, Out: out, Weight: s.Add(prefix+".weight", []int{out, in}, init)}
	}
	return &Linear{In: in, Out: out / t.Size, Weight: s.AddShard(prefix+".weight", t.split([]int{out, in}, 0, 1), init)}
}

// newRowNoBias registers a bias-free Linear in → out whose inputs t cuts
// into t.Size slices (newRow without the bias).
func newRowNoBias(s *ParamSet, prefix string, in, out int, t TP, init Init) *Linear {
	if !t.On() {
		return &Linear{In: in, Out: out, Weight: s.Add(prefix+".weight", []int{out, in}, init)}
	}
	return &Linear{In: in / t.Size, Out: out, Weight: s.AddShard(prefix+".weight", t.split([]int{out, in}, 1, 1), init)}
}

// newReplicatedNoBias registers a bias-free Linear that every shard holds
// whole inside a column-parallel region: each shard's gradient of it is
// the part its own outputs' use gives, summed over the group by the
// trainer (PartialGrad).
func newReplicatedNoBias(s *ParamSet, prefix string, in, out int, t TP, init Init) *Linear {
	l := &Linear{In: in, Out: out, Weight: s.Add(prefix+".weight", []int{out, in}, init)}
	l.Weight.PartialGrad = t.On()
	return l
}

func (p *projections) params() []*Param {
	ps := make([]*Param, 0, len(p.ls))
	for _, l := range p.ls {
		ps = append(ps, l.Weight)
	}
	return ps
}

// forward returns each map's output (fp32) and keeps x (or, with sequence
// parallelism, this shard's rows of it) for backward.
func (p *projections) forward(c *Ctx, x Act) []Act {
	in := x
	if p.tp.SP {
		in = allGatherRows(c, x)
	}
	in.X = c.lower(in.X)
	ys := make([]Act, len(p.ls))
	for i, l := range p.ls {
		_, n := p.window(i)
		y := c.Pool.Get(in.Rows * n)
		c.Be.Gemm(kernels.GemmArgs{TransB: true, M: in.Rows, N: n, K: l.In, Alpha: 1}, in.X, p.rowsOf(c, i, c.weight(l.Weight)), y)
		ys[i] = Act{X: y, Rows: in.Rows, Cols: n}
	}
	if p.tp.SP {
		c.Pool.Put(in.X)
		c.save(x.X)
	} else {
		c.keep(in.X)
	}
	return ys
}

// backward accumulates every map's weight gradient, takes ownership of the
// dys and returns dx (reduced over the tensor-parallel group).
func (p *projections) backward(c *Ctx, dys []Act) Act {
	rows := dys[0].Rows
	var x kernels.Buffer
	if p.tp.SP {
		part := c.pop()
		full := allGatherRows(c, Act{X: part, Rows: rows / c.group().Size(), Cols: p.ls[0].In})
		c.Pool.Put(part)
		x = full.X
	} else {
		x = c.Tape.Pop()
	}
	dx := c.Pool.Get(rows * p.ls[0].In)
	xo := c.operand(x)
	for i, l := range p.ls {
		dy := dys[i]
		_, n := p.window(i)
		d := c.operand(dy.X)
		c.Be.Gemm(kernels.GemmArgs{TransA: true, M: n, N: l.In, K: rows, Alpha: 1, Beta: 1}, d, xo, p.rowsOf(c, i, l.Weight.G))
		c.GradDone(l.Weight)
		beta := float32(1)
		if i == 0 {
			beta = 0
		}
		c.Be.Gemm(kernels.GemmArgs{M: rows, N: l.In, K: n, Alpha: 1, Beta: beta}, d, p.rowsOf(c, i, c.weight(l.Weight)), dx)
		c.release(dy.X, d)
		c.Pool.Put(dy.X)
	}
	c.release(x, xo)
	c.Pool.Put(x)
	out := Act{X: dx, Rows: rows, Cols: p.ls[0].In}
	switch {
	case p.tp.SP:
		return reduceScatterRows(c, out)
	case p.tp.On():
		return CopyToTP{}.Backward(c, out)
	}
	return out
}
