package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/nnref"
	"github.com/troupe-ml/troupe/nn/optim"
)

// Tolerance of float32 results against the float64 reference: each value
// is a sum of at most a few hundred float32 products, whose rounding error
// is ~sqrt(n)·6e-8 relative to the magnitudes summed, so 1e-4·(1 + |ref|)
// passes correct kernels with a wide margin while any wrong or missing term
// (an O(1) relative error) fails.
const tol = 1e-4

func close32(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= tol*(1+math.Abs(want))
}

func compare(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		if !close32(got[i], want[i]) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, reference %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(got))
	}
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * float32(r.NormFloat64())
	}
	return v
}

func refParams(s *nn.ParamSet) nnref.Params {
	p := nnref.Params{}
	for k, v := range s.StateDict() {
		p[k] = to64(v)
	}
	return p
}

func download(be kernels.Backend, b kernels.Buffer) []float32 {
	out := make([]float32, b.Len())
	be.Download(out, b)
	return out
}

// run does forward, a backward pass from a random upstream gradient, and
// returns y and dx on the host.
func run(be kernels.Backend, l nn.Layer, x []float32, rows, cols int, up func(n int) []float32) (y, dx []float32, dy []float32) {
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	xb := pool.Get(len(x))
	be.Upload(xb, x)
	out := l.Forward(c, nn.Act{X: xb, Rows: rows, Cols: cols})
	y = download(be, out.X)
	dy = up(len(y))
	be.Upload(out.X, dy)
	back := nn.Backward(c, []nn.Layer{l}, out)
	if back.X != nil {
		dx = download(be, back.X)
	}
	if c.Tape.Len() != 0 {
		panic(fmt.Sprintf("tape not empty after backward: %d buffers", c.Tape.Len()))
	}
	return y, dx, dy
}

func TestLayersAgainstReference(t *testing.T) {
	be := cpu.New(2)
	r := rand.New(rand.NewPCG(7, 8))
	up := func(n int) []float32 { return randF32(r, n, 1) }
	const rows = 33
	t.Run("Linear", func(t *testing.T) {
		s := nn.NewParamSet(be, 1)
		l := nn.NewLinear(s, "l", 17, 9, true)
		s.Finalize()
		x := randF32(r, rows*17, 1)
		s.ZeroGrads()
		y, dx, dy := run(be, l, x, rows, 17, up)
		p := refParams(s)
		compare(t, "y", y, nnref.Linear(to64(x), p["l.weight"], p["l.bias"], rows, 17, 9))
		rdx, rdw, rdb := nnref.LinearBackward(to64(x), p["l.weight"], to64(dy), rows, 17, 9, true)
		compare(t, "dx", dx, rdx)
		compare(t, "dW", download(be, l.Weight.G), rdw)
		compare(t, "db", download(be, l.Bias.G), rdb)
	})
	for _, fn := range []nn.Activation{nn.ReLU, nn.GELU} {
		t.Run(fn.String(), func(t *testing.T) {
			x := randF32(r, rows*7, 2)
			y, dx, dy := run(be, &nn.ActLayer{Fn: fn}, x, rows, 7, up)
			if fn == nn.ReLU {
				compare(t, "y", y, nnref.ReLU(to64(x)))
				compare(t, "dx", dx, nnref.ReLUBackward(to64(x), to64(dy)))
			} else {
				compare(t, "y", y, nnref.GELU(to64(x)))
				compare(t, "dx", dx, nnref.GELUBackward(to64(x), to64(dy)))
			}
		})
	}
	t.Run("LayerNorm", func(t *testing.T) {
		s := nn.NewParamSet(be, 1)
		l := nn.NewLayerNorm(s, "ln", 24)
		s.Finalize()
		// Non-trivial affine parameters.
		w := append(randF32(r, 24, 1), randF32(r, 24, 1)...)
		if err := s.SetHostWeights(w); err != nil {
			t.Fatal(err)
		}
		s.ZeroGrads()
		x := randF32(r, rows*24, 3)
		y, dx, dy := run(be, l, x, rows, 24, up)
		p := refParams(s)
		ry, mean, rstd := nnref.LayerNorm(to64(x), p["ln.weight"], p["ln.bias"], rows, 24, 1e-5)
		compare(t, "y", y, ry)
		rdx, rdg, rdb := nnref.LayerNormBackward(to64(x), p["ln.weight"], mean, rstd, to64(dy), rows, 24)
		compare(t, "dx", dx, rdx)
		compare(t, "dgamma", download(be, l.Weight.G), rdg)
		compare(t, "dbeta", download(be, l.Bias.G), rdb)
	})
	t.Run("Attention", func(t *testing.T) {
		const B, T, C, H = 3, 5, 12, 3
		s := nn.NewParamSet(be, 1)
		a, err := nn.NewCausalSelfAttention(s, "a", C, H, T, 0.3, 0.3, nn.NoTP)
		if err != nil {
			t.Fatal(err)
		}
		s.Finalize()
		// Non-zero biases, so their gradients are checked too.
		if err := s.SetHostWeights(randF32(r, s.Len(), 0.3)); err != nil {
			t.Fatal(err)
		}
		s.ZeroGrads()
		x := randF32(r, B*T*C, 1)
		y, dx, dy := run(be, a, x, B*T, C, up)
		p := refParams(s)
		ry, cache := nnref.Attention(to64(x), p["a.qkv.weight"], p["a.qkv.bias"], p["a.proj.weight"], p["a.proj.bias"], B, T, C, H)
		compare(t, "y", y, ry)
		rdx, rdwqkv, rdbqkv, rdwp, rdbp := nnref.AttentionBackward(to64(x), p["a.qkv.weight"], p["a.proj.weight"], cache, to64(dy), B, T, C, H)
		compare(t, "dx", dx, rdx)
		compare(t, "dWqkv", download(be, a.QKV.Weight.G), rdwqkv)
		compare(t, "dbqkv", download(be, a.QKV.Bias.G), rdbqkv)
		compare(t, "dWproj", download(be, a.Proj.Weight.G), rdwp)
		compare(t, "dbproj", download(be, a.Proj.Bias.G), rdbp)
	})
}

// lossAndGrads runs one forward/backward of a model on the CPU backend and
// returns the mean loss and every gradient by name.
func lossAndGrads(be kernels.Backend, m *nn.Model, x []float32, tokens, targets []int32) (float64, map[string][]float32) {
	r := passOn(be, nil, m, x, tokens, targets)
	return r.loss, r.grads
}

func ints(x []int32) []int {
	y := make([]int, len(x))
	for i, v := range x {
		y[i] = int(v)
	}
	return y
}

func TestModelsAgainstReference(t *testing.T) {
	be := cpu.New(2)
	r := rand.New(rand.NewPCG(9, 10))
	t.Run("MLP", func(t *testing.T) {
		m, err := models.NewMLP(be, models.MLP{Sizes: []int{20, 16, 12, 5}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		const rows = 9
		x := randF32(r, rows*20, 1)
		y := make([]int32, rows)
		for i := range y {
			y[i] = int32(r.IntN(5))
		}
		loss, g := lossAndGrads(be, m, x, nil, y)
		rl, rg := nnref.MLP{Sizes: []int{20, 16, 12, 5}}.Loss(refParams(m.Set), to64(x), ints(y))
		if !close32(float32(loss), rl) {
			t.Errorf("loss %v, reference %v", loss, rl)
		}
		for name, want := range rg {
			compare(t, "d"+name, g[name], want)
		}
	})
	for _, untied := range []bool{false, true} {
		t.Run(fmt.Sprintf("GPT/untied=%v", untied), func(t *testing.T) {
			cfg := models.GPT{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 4, Untied: untied}
			m, err := models.NewGPT(be, cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			// Larger weights than the 0.02 init, so every path matters.
			if err := m.Set.SetHostWeights(randF32(r, m.Set.Len(), 0.3)); err != nil {
				t.Fatal(err)
			}
			const batch = 3
			tokens := make([]int32, batch*cfg.Context)
			targets := make([]int32, len(tokens))
			for i := range tokens {
				tokens[i], targets[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
			}
			targets[5] = -1 // an ignored position
			loss, g := lossAndGrads(be, m, nil, tokens, targets)
			ref := nnref.GPT{Vocab: cfg.Vocab, Context: cfg.Context, DModel: cfg.DModel, Layers: cfg.Layers, Heads: cfg.Heads, Untied: untied}
			rl, rg := ref.Loss(refParams(m.Set), ints(tokens), ints(targets))
			if !close32(float32(loss), rl) {
				t.Errorf("loss %v, reference %v", loss, rl)
			}
			if len(rg) != len(g) {
				t.Errorf("%d gradients, reference has %d", len(g), len(rg))
			}
			for name, want := range rg {
				compare(t, "d"+name, g[name], want)
			}
		})
	}
}

// TestTrainingMatchesReference trains a few steps with troupe's float32
// optimizers and the float64 reference from the same weights and batches.
// Differences compound over steps, so the loss tolerance is 1e-3 relative:
// still far below the per-step loss change (~1e-2).
func TestTrainingMatchesReference(t *testing.T) {
	be := cpu.New(2)
	r := rand.New(rand.NewPCG(11, 12))
	const steps = 5
	t.Run("MLP/SGD", func(t *testing.T) {
		sizes := []int{12, 10, 4}
		m, _ := models.NewMLP(be, models.MLP{Sizes: sizes}, 5)
		opt, err := optim.New(m.Set, optim.Config{Name: "sgd", Momentum: 0.9, WeightDecay: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		ref := refParams(m.Set)
		ro := &nnref.SGD{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-3}
		for step := 0; step < steps; step++ {
			x := randF32(r, 8*12, 1)
			y := make([]int32, 8)
			for i := range y {
				y[i] = int32(r.IntN(4))
			}
			loss, _ := lossAndGrads(be, m, x, nil, y)
			opt.Step(0.1)
			rl, rg := nnref.MLP{Sizes: sizes}.Loss(ref, to64(x), ints(y))
			ro.Step(ref, rg)
			if math.Abs(loss-rl) > 1e-3*math.Abs(rl) {
				t.Errorf("step %d: loss %v, reference %v", step, loss, rl)
			}
		}
	})
	t.Run("GPT/AdamW", func(t *testing.T) {
		cfg := models.GPT{Vocab: 9, Context: 6, DModel: 8, Layers: 2, Heads: 2}
		m, _ := models.NewGPT(be, cfg, 6)
		oc := optim.DefaultConfig("adamw")
		opt, err := optim.New(m.Set, oc)
		if err != nil {
			t.Fatal(err)
		}
		ref := refParams(m.Set)
		ro := &nnref.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
		rm := nnref.GPT{Vocab: cfg.Vocab, Context: cfg.Context, DModel: cfg.DModel, Layers: cfg.Layers, Heads: cfg.Heads}
		for step := 0; step < steps; step++ {
			tokens := make([]int32, 2*cfg.Context)
			targets := make([]int32, len(tokens))
			for i := range tokens {
				tokens[i], targets[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
			}
			loss, _ := lossAndGrads(be, m, nil, tokens, targets)
			opt.Step(1e-2)
			rl, rg := rm.Loss(ref, ints(tokens), ints(targets))
			ro.Step(ref, rg, 0)
			if math.Abs(loss-rl) > 1e-3*math.Abs(rl) {
				t.Errorf("step %d: loss %v, reference %v", step, loss, rl)
			}
		}
	})
}

func TestPoolReturnsEverything(t *testing.T) {
	be := cpu.New(1)
	m, err := models.NewGPT(be, models.GPT{Vocab: 5, Context: 4, DModel: 8, Layers: 1, Heads: 2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	ids := be.AllocIndex(8)
	tg := be.AllocIndex(8)
	for step := 0; step < 2; step++ {
		logits := nn.Forward(c, m.Layers, nn.Act{Ids: ids, Rows: 8})
		_, d := nn.CrossEntropy(c, logits, tg, 1.0/8)
		nn.Backward(c, m.Layers, d)
		if pool.LiveBytes() != 0 {
			t.Fatalf("step %d: %d bytes still live after backward", step, pool.LiveBytes())
		}
	}
	if pool.PeakBytes() == 0 {
		t.Fatal("peak activation memory not recorded")
	}
}

// Released weights come back as a zeroed flat buffer that every parameter
// views again; a set that has its weights keeps them.
func TestParamSetReleaseAndAllocWeights(t *testing.T) {
	be := cpu.New(1)
	s := nn.NewParamSet(be, 3)
	a := s.Add("a", []int{2, 3}, nn.Const(1))
	b := s.Add("b", []int{4}, nn.Const(1))
	s.Finalize()
	s.AllocWeights() // has them: nothing changes
	if w := s.HostWeights(); w[0] != 1 || w[6] != 1 {
		t.Fatal("AllocWeights on a set that has its weights cleared them")
	}
	s.ReleaseWeights()
	if s.Weights() != nil || a.W != nil || b.W != nil {
		t.Fatal("released weights are still bound")
	}
	s.AllocWeights()
	if s.Weights() == nil || a.W == nil || b.W == nil {
		t.Fatal("AllocWeights left a parameter without weights")
	}
	for i, v := range s.HostWeights() {
		if v != 0 {
			t.Fatalf("weight %d is %v after AllocWeights, want 0", i, v)
		}
	}
	be.Upload(b.W, []float32{1, 2, 3, 4})
	if w := s.HostWeights(); w[6] != 1 || w[9] != 4 {
		t.Fatalf("parameter b does not view the flat buffer at its offset: %v", w)
	}
}

// A dropped buffer leaves the live count like a returned one, but is not
// kept for reuse: the next Get of its length allocates anew.
func TestPoolDrop(t *testing.T) {
	p := nn.NewPool(cpu.New(1))
	a := p.Get(8)
	p.Drop(a)
	if p.LiveBytes() != 0 || p.PeakBytes() != 32 {
		t.Fatalf("after a drop: live %d, peak %d bytes; want 0 and 32", p.LiveBytes(), p.PeakBytes())
	}
	b := p.Get(8)
	if cpu.F(b)[:1][0] = 7; cpu.F(a)[0] == 7 {
		t.Fatal("Get after Drop handed the dropped buffer out again")
	}
	p.Put(b)
	if c := p.Get(8); cpu.F(c)[0] != 7 {
		t.Fatal("a returned buffer was not reused")
	}
	p.Drop(nil)
}

// TestMoveGrads: the gradients move into a new buffer with their values,
// and every parameter's gradient is a view of it.
func TestMoveGrads(t *testing.T) {
	be := cpu.New(1)
	m, err := models.NewMLP(be, models.MLP{Sizes: []int{4, 3, 2}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	set := m.Set
	old := make([]float32, set.Len())
	for i := range old {
		old[i] = float32(i)
	}
	be.Upload(set.Grads(), old)
	if err := set.MoveGrads(be.Alloc(set.Len() - 1)); err == nil {
		t.Fatal("a buffer of the wrong length was taken")
	}
	g := be.Alloc(set.Len())
	if err := set.MoveGrads(g); err != nil {
		t.Fatal(err)
	}
	if &cpu.F(set.Grads())[0] != &cpu.F(g)[0] {
		t.Fatal("the set's gradients are not the new buffer")
	}
	for _, p := range set.Params() {
		got := cpu.F(p.G)
		if got[0] != float32(p.Offset) {
			t.Fatalf("%s: first gradient %v, want %v", p.Name, got[0], p.Offset)
		}
		got[0] = -1
		if cpu.F(g)[p.Offset] != -1 {
			t.Fatalf("%s: its gradient is not a view of the new buffer", p.Name)
		}
	}
}
