package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// memTP is an in-memory tensor-parallel group for tests: size shards, one
// goroutine each, each with its own backend. Every operation is a
// rendezvous: each shard deposits a host copy of its input, the last to
// arrive computes every shard's result in shard order (so the sums have
// one order and every shard gets the same bits), and each shard takes its
// own. It counts the operations and values each shard sent.
type memTP struct {
	size int
	mu   sync.Mutex
	cond *sync.Cond
	// in holds this round's deposits, out its results; round counts
	// completed rounds and arrived the deposits of the current one.
	in, out [][]float32
	round   int
	arrived int
	counts  map[string]int
}

func newMemTP(size int) *memTP {
	g := &memTP{size: size, in: make([][]float32, size), out: make([][]float32, size), counts: map[string]int{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// shard is shard rank's handle on the group.
type memShard struct {
	g    *memTP
	rank int
	be   kernels.Backend
}

func (s *memShard) Rank() int { return s.rank }
func (s *memShard) Size() int { return s.g.size }

// exchange deposits x and returns this shard's result of combine.
func (s *memShard) exchange(kind string, x []float32, combine func(in [][]float32) [][]float32) []float32 {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	round := g.round
	g.in[s.rank] = x
	if s.rank == 0 {
		g.counts[kind]++
	}
	g.arrived++
	if g.arrived == g.size {
		g.out = combine(g.in)
		g.in = make([][]float32, g.size)
		g.arrived = 0
		g.round++
		g.cond.Broadcast()
	}
	for g.round == round {
		g.cond.Wait()
	}
	return g.out[s.rank]
}

func (s *memShard) download(b kernels.Buffer) []float32 {
	h := make([]float32, b.Len())
	s.be.Download(h, b)
	return h
}

func (s *memShard) AllReduce(x kernels.Buffer, op nn.TPReduce) {
	out := s.exchange(fmt.Sprintf("all-reduce/%d", op), s.download(x), func(in [][]float32) [][]float32 {
		acc := append([]float32(nil), in[0]...)
		for _, b := range in[1:] {
			for i, v := range b {
				if op == nn.TPMax {
					acc[i] = max(acc[i], v)
				} else {
					acc[i] += v
				}
			}
		}
		res := make([][]float32, len(in))
		for r := range res {
			res[r] = acc
		}
		return res
	})
	s.be.Upload(x, out)
}

func (s *memShard) ReduceScatter(dst, x kernels.Buffer) {
	n := dst.Len()
	out := s.exchange("reduce-scatter", s.download(x), func(in [][]float32) [][]float32 {
		res := make([][]float32, len(in))
		for r := range res {
			acc := append([]float32(nil), in[0][r*n:(r+1)*n]...)
			for _, b := range in[1:] {
				for i, v := range b[r*n : (r+1)*n] {
					acc[i] += v
				}
			}
			res[r] = acc
		}
		return res
	})
	s.be.Upload(dst, out)
}

func (s *memShard) AllGather(dst, x kernels.Buffer) {
	out := s.exchange("all-gather", s.download(x), func(in [][]float32) [][]float32 {
		var all []float32
		for _, b := range in {
			all = append(all, b...)
		}
		res := make([][]float32, len(in))
		for r := range res {
			res[r] = all
		}
		return res
	})
	s.be.Upload(dst, out)
}

// onShards runs body on size shards at once, each with its own backend and
// handle on one group, and returns the group.
func onShards(size int, body func(s *memShard)) *memTP {
	g := newMemTP(size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(&memShard{g: g, rank: r, be: cpu.New(1)})
		}()
	}
	wg.Wait()
	return g
}

func TestSplitExtractInsertRoundTrip(t *testing.T) {
	for _, k := range []struct {
		full          []int
		dim, blocks   int
		parts, padded int
	}{
		{[]int{12, 5}, 0, 3, 2, 0},  // a fused qkv: 3 blocks of 4 rows, 2 rows each
		{[]int{5, 8}, 1, 1, 4, 0},   // a row-parallel weight: columns
		{[]int{126, 3}, 0, 1, 4, 2}, // a vocabulary: 4 × 32 rows, 2 of padding
		{[]int{5, 2}, 0, 1, 4, 3},   // the last shard all padding
		{[]int{9}, 0, 3, 3, 0},      // a qkv bias
	} {
		t.Run(fmt.Sprint(k.full, k.dim, k.blocks, k.parts), func(t *testing.T) {
			n := 1
			for _, d := range k.full {
				n *= d
			}
			whole := make([]float32, n)
			for i := range whole {
				whole[i] = float32(i + 1)
			}
			back := make([]float32, n)
			padding := 0
			for i := range k.parts {
				s := nn.Split{Full: k.full, Dim: k.dim, Blocks: k.blocks, Parts: k.parts, Index: i}
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				shape := s.Shape()
				m := 1
				for _, d := range shape {
					m *= d
				}
				shard := make([]float32, m)
				for j := range shard {
					shard[j] = -1 // Extract must overwrite the padding too
				}
				s.Extract(shard, whole)
				for _, v := range shard {
					if v == 0 {
						padding++
					}
					if v < 0 {
						t.Fatalf("shard %d kept a stale value: %v", i, shard)
					}
				}
				s.Insert(back, shard)
			}
			for i := range whole {
				if back[i] != whole[i] {
					t.Fatalf("element %d: %v after Extract and Insert, want %v", i, back[i], whole[i])
				}
			}
			rowElems := n / k.full[0]
			if want := k.padded * rowElems; padding != want {
				t.Errorf("%d padding zeros, want %d", padding, want)
			}
		})
	}
}

// TestConjugateOperators checks each operator's forward and backward on
// three shards with integer values, whose sums are exact.
func TestConjugateOperators(t *testing.T) {
	const T, rows, cols = 3, 6, 2
	val := func(rank, i int) float32 { return float32(100*rank + i) }
	type result struct{ fwd, bwd []float32 }
	run := func(l nn.Layer, inRows, dyRows int) []result {
		out := make([]result, T)
		onShards(T, func(s *memShard) {
			be := s.be
			c := nn.NewCtx(be, nn.NewPool(be))
			c.TP = s
			x := make([]float32, inRows*cols)
			for i := range x {
				x[i] = val(s.rank, i)
			}
			xb := be.Alloc(len(x))
			be.Upload(xb, x)
			y := l.Forward(c, nn.Act{X: xb, Rows: inRows, Cols: cols})
			dy := make([]float32, dyRows*cols)
			for i := range dy {
				dy[i] = val(s.rank, i) + 0.5
			}
			db := be.Alloc(len(dy))
			be.Upload(db, dy)
			dx := l.Backward(c, nn.Act{X: db, Rows: dyRows, Cols: cols})
			out[s.rank] = result{s.download(y.X), s.download(dx.X)}
		})
		return out
	}
	sum := func(lo, n int, off float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			for r := range T {
				v[i] += val(r, lo+i) + off
			}
		}
		return v
	}
	own := func(rank, n int, off float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = val(rank, i) + off
		}
		return v
	}
	gathered := func(n int, off float32) []float32 {
		var v []float32
		for r := range T {
			v = append(v, own(r, n, off)...)
		}
		return v
	}
	same := func(t *testing.T, what string, got, want []float32) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	n := rows * cols
	t.Run("CopyToTP", func(t *testing.T) {
		for r, res := range run(nn.CopyToTP{}, rows, rows) {
			same(t, "forward", res.fwd, own(r, n, 0))
			same(t, "backward", res.bwd, sum(0, n, 0.5))
		}
	})
	t.Run("ReduceFromTP", func(t *testing.T) {
		for r, res := range run(nn.ReduceFromTP{}, rows, rows) {
			same(t, "forward", res.fwd, sum(0, n, 0))
			same(t, "backward", res.bwd, own(r, n, 0.5))
		}
	})
	t.Run("GatherFromSeq", func(t *testing.T) {
		for r, res := range run(nn.GatherFromSeq{}, rows/T, rows) {
			same(t, "forward", res.fwd, gathered(n/T, 0))
			same(t, "backward", res.bwd, sum(r*n/T, n/T, 0.5))
		}
	})
	t.Run("ScatterToSeq", func(t *testing.T) {
		for r, res := range run(nn.ScatterToSeq{}, rows, rows/T) {
			same(t, "forward", res.fwd, sum(r*n/T, n/T, 0))
			same(t, "backward", res.bwd, gathered(n/T, 0.5))
		}
	})
}

// shardRun is what one shard of a model computed: loss and gradients by
// parameter.
type shardRun struct {
	loss  float64
	grads map[string][]float32
	ps    map[string]*nn.Param
	// peak is the activation pool's high-water mark in bytes.
	peak int64
}

// passOn runs one forward and backward of m (the whole model when g is
// nil) and returns its mean loss and gradients.
func passOn(be kernels.Backend, g nn.TPGroup, m *nn.Model, x []float32, tokens, targets []int32) shardRun {
	r, err := passIn(be, g, kernels.F32, m, x, tokens, targets)
	if err != nil {
		panic(err)
	}
	return r
}

// passIn is passOn computing in dt (kernels.F32: fp32; else mixed
// precision, the weights' compute copies refreshed first).
func passIn(be kernels.Backend, g nn.TPGroup, dt kernels.DType, m *nn.Model, x []float32, tokens, targets []int32) (shardRun, error) {
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	if g != nil {
		c.TP = g
	}
	if err := c.SetPrecision(dt); err != nil {
		return shardRun{}, err
	}
	if dt != kernels.F32 {
		if err := nn.RefreshLow(be, dt, m.Set.Params()); err != nil {
			return shardRun{}, err
		}
	}
	m.Set.ZeroGrads()
	var in nn.Act
	if m.Input == nn.DenseInput {
		xb := pool.Get(len(x))
		be.Upload(xb, x)
		in = nn.Act{X: xb, Rows: len(targets), Cols: m.Features}
	} else {
		ids := be.AllocIndex(len(tokens))
		be.UploadIndex(ids, tokens)
		in = nn.Act{Ids: ids, Rows: len(tokens)}
	}
	tg := be.AllocIndex(len(targets))
	be.UploadIndex(tg, targets)
	count := 0
	for _, v := range targets {
		if v >= 0 {
			count++
		}
	}
	logits := nn.Forward(c, m.Layers, in)
	sum, d := m.Loss(c, logits, nn.Targets{Ids: tg}, float32(1/float64(count)))
	nn.Backward(c, m.Layers, d)
	res := shardRun{loss: sum / float64(count), grads: map[string][]float32{}, ps: map[string]*nn.Param{}, peak: pool.PeakBytes()}
	for _, p := range m.Set.Params() {
		res.grads[p.Name] = download(be, p.G)
		res.ps[p.Name] = p
	}
	if pool.LiveBytes() != 0 {
		return res, fmt.Errorf("%d bytes of activations still out after the pass", pool.LiveBytes())
	}
	return res, nil
}

// TestShardsMatchTheWholeModel runs one forward and backward of a model
// cut into T tensor-parallel shards (with and without sequence
// parallelism) and of the whole model from the same weights and batch:
//   - every shard reports the whole model's loss (relative 1e-5: the
//     shards sum the same terms in another order, float32 rounding only);
//   - the shards' gradients of cut parameters, put together, and the sum of
//     partial gradients, equal the whole model's within 1e-5 of each
//     tensor's largest gradient;
//   - the replicated parameters' gradients are the same bits on every
//     shard (Megatron-LM relies on it: they are never reduced);
//   - each shard's initial weights are its part of the whole model's
//     (bit for bit), and the padded vocabulary rows are zero.
func TestShardsMatchTheWholeModel(t *testing.T) {
	gpt := models.GPT{Vocab: 126, Context: 8, DModel: 16, Layers: 2, Heads: 4}
	untied := gpt
	untied.Untied = true
	cases := []struct {
		name string
		spec nn.Spec
		tps  []nn.TP
	}{
		{"gpt", gpt, []nn.TP{{Size: 2}, {Size: 4}, {Size: 2, SP: true}, {Size: 4, SP: true}}},
		{"gpt-untied", untied, []nn.TP{{Size: 4}}},
		{"mlp", models.MLP{Sizes: []int{12, 16, 8, 5}}, []nn.TP{{Size: 2}, {Size: 4}}},
	}
	for _, k := range cases {
		for _, tp := range k.tps {
			t.Run(fmt.Sprintf("%s/tp=%d/sp=%v", k.name, tp.Size, tp.SP), func(t *testing.T) {
				checkShards(t, k.spec, tp)
			})
		}
	}
}

func checkShards(t *testing.T, spec nn.Spec, tp nn.TP) {
	r := rand.New(rand.NewPCG(5, uint64(tp.Size)))
	be := cpu.New(1)
	whole, err := nn.Build(be, spec, 7, 0, spec.Units())
	if err != nil {
		t.Fatal(err)
	}
	init := whole.Set.StateDict()
	// Larger weights than the init's, so that every path matters.
	if err := whole.Set.SetHostWeights(randF32(r, whole.Set.Len(), 0.3)); err != nil {
		t.Fatal(err)
	}
	var x []float32
	var tokens, targets []int32
	if whole.Input == nn.TokenInput {
		tokens = make([]int32, 3*whole.Context)
		targets = make([]int32, len(tokens))
		for i := range tokens {
			tokens[i], targets[i] = int32(r.IntN(whole.Classes)), int32(r.IntN(whole.Classes))
		}
		targets[5] = -1
		targets[6] = int32(whole.Classes - 1) // in the last, padded shard
	} else {
		x = randF32(r, 9*whole.Features, 1)
		targets = make([]int32, 9)
		for i := range targets {
			targets[i] = int32(r.IntN(whole.Classes))
		}
	}
	want := passOn(be, nil, whole, x, tokens, targets)
	weights := whole.Set.StateDict()

	shards := make([]shardRun, tp.Size)
	errs := make([]error, tp.Size)
	onShards(tp.Size, func(s *memShard) {
		place := tp
		place.Rank = s.rank
		m, err := nn.BuildShard(s.be, spec, 7, 0, spec.Units(), place)
		if err != nil {
			errs[s.rank] = err
			return
		}
		errs[s.rank] = checkInit(m, init)
		if err := m.Set.LoadStateDict(weights, nil); err != nil && errs[s.rank] == nil {
			errs[s.rank] = err
		}
		shards[s.rank] = passOn(s.be, s, m, x, tokens, targets)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, sh := range shards {
		if math.Abs(sh.loss-want.loss) > 1e-5*math.Abs(want.loss) {
			t.Errorf("shard %d: loss %v, whole model %v", i, sh.loss, want.loss)
		}
	}
	for name, wg := range want.grads {
		got := make([]float32, len(wg))
		p0 := shards[0].ps[name]
		for i, sh := range shards {
			g, p := sh.grads[name], sh.ps[name]
			switch {
			case p == nil:
				t.Fatalf("shard %d has no parameter %s", i, name)
			case p.Split != nil:
				p.Split.Insert(got, g)
			case p.PartialGrad:
				for j, v := range g {
					got[j] += v
				}
			default:
				for j, v := range g {
					if math.Float32bits(v) != math.Float32bits(shards[0].grads[name][j]) {
						t.Fatalf("%s is replicated, but its gradient differs between shards 0 and %d at %d: %v, %v", name, i, j, shards[0].grads[name][j], v)
					}
				}
				copy(got, g)
			}
		}
		if p0.PartialGrad != tp.SP && p0.Split == nil && name != "tok.weight" && name != "head.weight" {
			// Every replicated parameter of a sequence-parallel model
			// sees only its rows, and none of another model does.
			t.Errorf("%s: PartialGrad %v with sequence parallelism %v", name, p0.PartialGrad, tp.SP)
		}
		top := 0.0
		for _, v := range wg {
			top = math.Max(top, math.Abs(float64(v)))
		}
		for j := range wg {
			if d := math.Abs(float64(got[j]) - float64(wg[j])); d > 1e-5*top+1e-12 {
				t.Fatalf("d%s[%d] = %v from the shards, %v from the whole model (largest %v)", name, j, got[j], wg[j], top)
			}
		}
	}
}

// checkInit checks that m's initial weights are its part of the whole
// model's, bit for bit, with zero padding.
func checkInit(m *nn.Model, whole map[string][]float32) error {
	for name, w := range m.Set.StateDict() {
		p := m.Set.Get(name)
		want := whole[name]
		if p.Split != nil {
			want = make([]float32, p.Size())
			p.Split.Extract(want, whole[name])
		}
		for i := range w {
			if math.Float32bits(w[i]) != math.Float32bits(want[i]) {
				return fmt.Errorf("%s[%d] starts at %v, the whole model's part is %v", name, i, w[i], want[i])
			}
		}
	}
	return nil
}
