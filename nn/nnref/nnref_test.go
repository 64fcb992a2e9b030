package nnref

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Central differences in float64 with h = 1e-5 have truncation error
// O(h²·f”') ≈ 1e-10 and rounding error ≈ 1e-16·|f|/h ≈ 1e-11 for the O(1)
// losses here, so analytic and numeric gradients must agree to ~1e-8; the
// tolerance 1e-6 (absolute + relative) leaves room and still catches any
// wrong term, which is O(gradient).
const (
	fdH   = 1e-5
	fdTol = 1e-6
)

func randVec(r *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = scale * r.NormFloat64()
	}
	return v
}

// checkGrad compares analytic gradients of f at every coordinate of each
// named vector (or a random sample of maxPer coordinates).
func checkGrad(t *testing.T, vars map[string][]float64, grads map[string][]float64, f func() float64, maxPer int, r *rand.Rand) {
	t.Helper()
	for name, v := range vars {
		g := grads[name]
		if len(g) != len(v) {
			t.Fatalf("%s: gradient has %d entries, want %d", name, len(g), len(v))
		}
		idx := make([]int, len(v))
		for i := range idx {
			idx[i] = i
		}
		if len(idx) > maxPer {
			r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
			idx = idx[:maxPer]
		}
		for _, i := range idx {
			old := v[i]
			v[i] = old + fdH
			fp := f()
			v[i] = old - fdH
			fm := f()
			v[i] = old
			num := (fp - fm) / (2 * fdH)
			if d := math.Abs(num - g[i]); d > fdTol*(1+math.Abs(num)) {
				t.Errorf("%s[%d]: analytic %.10g, numeric %.10g (diff %.3g)", name, i, g[i], num, d)
			}
		}
	}
}

// dot is the scalar loss Σ w⊙y used to check a layer's backward pass with
// an arbitrary upstream gradient w.
func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func TestLayersFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, in, out = 5, 7, 3
	t.Run("Linear", func(t *testing.T) {
		x, w, b := randVec(r, rows*in, 1), randVec(r, out*in, 1), randVec(r, out, 1)
		up := randVec(r, rows*out, 1)
		f := func() float64 { return dot(up, Linear(x, w, b, rows, in, out)) }
		dx, dw, db := LinearBackward(x, w, up, rows, in, out, true)
		checkGrad(t, map[string][]float64{"x": x, "w": w, "b": b}, map[string][]float64{"x": dx, "w": dw, "b": db}, f, 1000, r)
	})
	t.Run("ReLU", func(t *testing.T) {
		x := randVec(r, 40, 1)
		up := randVec(r, 40, 1)
		f := func() float64 { return dot(up, ReLU(x)) }
		checkGrad(t, map[string][]float64{"x": x}, map[string][]float64{"x": ReLUBackward(x, up)}, f, 1000, r)
	})
	t.Run("GELU", func(t *testing.T) {
		x := randVec(r, 40, 2)
		up := randVec(r, 40, 1)
		f := func() float64 { return dot(up, GELU(x)) }
		checkGrad(t, map[string][]float64{"x": x}, map[string][]float64{"x": GELUBackward(x, up)}, f, 1000, r)
	})
	t.Run("LayerNorm", func(t *testing.T) {
		x, gm, bt := randVec(r, rows*in, 1), randVec(r, in, 1), randVec(r, in, 1)
		up := randVec(r, rows*in, 1)
		f := func() float64 { y, _, _ := LayerNorm(x, gm, bt, rows, in, 1e-5); return dot(up, y) }
		_, mean, rstd := LayerNorm(x, gm, bt, rows, in, 1e-5)
		dx, dg, db := LayerNormBackward(x, gm, mean, rstd, up, rows, in)
		checkGrad(t, map[string][]float64{"x": x, "gamma": gm, "beta": bt}, map[string][]float64{"x": dx, "gamma": dg, "beta": db}, f, 1000, r)
	})
	t.Run("Embedding", func(t *testing.T) {
		table := randVec(r, 6*4, 1)
		ids := []int{0, 3, 3, 5, 1, 0}
		up := randVec(r, len(ids)*4, 1)
		f := func() float64 { return dot(up, Embedding(table, ids, 4)) }
		checkGrad(t, map[string][]float64{"table": table}, map[string][]float64{"table": EmbeddingBackward(up, ids, 6, 4)}, f, 1000, r)
	})
	t.Run("CrossEntropy", func(t *testing.T) {
		logits := randVec(r, 4*5, 2)
		tg := []int{1, -1, 4, 0}
		f := func() float64 { l, _ := CrossEntropy(logits, tg, 5); return l }
		_, d := CrossEntropy(logits, tg, 5)
		checkGrad(t, map[string][]float64{"logits": logits}, map[string][]float64{"logits": d}, f, 1000, r)
	})
	t.Run("Attention", func(t *testing.T) {
		const b, tt, c, h = 2, 5, 6, 2
		x := randVec(r, b*tt*c, 1)
		wqkv, bqkv := randVec(r, 3*c*c, 0.5), randVec(r, 3*c, 0.5)
		wp, bp := randVec(r, c*c, 0.5), randVec(r, c, 0.5)
		up := randVec(r, b*tt*c, 1)
		f := func() float64 { y, _ := Attention(x, wqkv, bqkv, wp, bp, b, tt, c, h); return dot(up, y) }
		_, cache := Attention(x, wqkv, bqkv, wp, bp, b, tt, c, h)
		dx, dwqkv, dbqkv, dwp, dbp := AttentionBackward(x, wqkv, wp, cache, up, b, tt, c, h)
		checkGrad(t,
			map[string][]float64{"x": x, "wqkv": wqkv, "bqkv": bqkv, "wp": wp, "bp": bp},
			map[string][]float64{"x": dx, "wqkv": dwqkv, "bqkv": dbqkv, "wp": dwp, "bp": dbp}, f, 1000, r)
	})
}

// RandomGPTParams draws a small GPT's weights for tests.
func randomGPT(r *rand.Rand, m GPT) Params {
	p := Params{
		"tok.weight": randVec(r, m.Vocab*m.DModel, 0.3),
		"pos.weight": randVec(r, m.Context*m.DModel, 0.3),
		"lnf.weight": randVec(r, m.DModel, 1),
		"lnf.bias":   randVec(r, m.DModel, 0.1),
	}
	if m.Untied {
		p["head.weight"] = randVec(r, m.Vocab*m.DModel, 0.3)
	}
	C := m.DModel
	for l := 0; l < m.Layers; l++ {
		pre := fmt.Sprintf("blocks.%d.", l)
		p[pre+"ln1.weight"], p[pre+"ln1.bias"] = randVec(r, C, 1), randVec(r, C, 0.1)
		p[pre+"ln2.weight"], p[pre+"ln2.bias"] = randVec(r, C, 1), randVec(r, C, 0.1)
		p[pre+"qkv.weight"], p[pre+"qkv.bias"] = randVec(r, 3*C*C, 0.3), randVec(r, 3*C, 0.1)
		p[pre+"proj.weight"], p[pre+"proj.bias"] = randVec(r, C*C, 0.3), randVec(r, C, 0.1)
		p[pre+"fc.weight"], p[pre+"fc.bias"] = randVec(r, 4*C*C, 0.3), randVec(r, 4*C, 0.1)
		p[pre+"out.weight"], p[pre+"out.bias"] = randVec(r, 4*C*C, 0.3), randVec(r, C, 0.1)
	}
	return p
}

func TestModelsFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	t.Run("MLP", func(t *testing.T) {
		m := MLP{Sizes: []int{6, 5, 4, 3}}
		p := Params{}
		for i := 1; i < len(m.Sizes); i++ {
			p[fmt.Sprintf("fc%d.weight", i)] = randVec(r, m.Sizes[i]*m.Sizes[i-1], 0.5)
			p[fmt.Sprintf("fc%d.bias", i)] = randVec(r, m.Sizes[i], 0.5)
		}
		x := randVec(r, 4*6, 1)
		y := []int{0, 2, 1, 2}
		_, g := m.Loss(p, x, y)
		checkGrad(t, p, g, func() float64 { l, _ := m.Loss(p, x, y); return l }, 1000, r)
	})
	for _, untied := range []bool{false, true} {
		t.Run(fmt.Sprintf("GPT/untied=%v", untied), func(t *testing.T) {
			m := GPT{Vocab: 7, Context: 4, DModel: 8, Layers: 2, Heads: 2, Untied: untied}
			p := randomGPT(r, m)
			tokens := []int{1, 5, 2, 6, 0, 3, 3, 4}
			targets := []int{5, 2, 6, 0, 3, 3, 4, -1}
			_, g := m.Loss(p, tokens, targets)
			checkGrad(t, p, g, func() float64 { l, _ := m.Loss(p, tokens, targets); return l }, 25, r)
		})
	}
}

func TestOptimizersMatchHandWorked(t *testing.T) {
	// One AdamW step from zero state moves each weight by lr·sign(g) (the
	// bias-corrected ratio is g/|g| up to eps) after decoupled decay.
	p := Params{"w": {1, -2}}
	g := Params{"w": {0.5, -0.25}}
	o := &AdamW{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	o.Step(p, g, 0)
	want := []float64{1*(1-0.001) - 0.1, -2*(1-0.001) + 0.1}
	for i := range want {
		if math.Abs(p["w"][i]-want[i]) > 1e-7 {
			t.Errorf("AdamW w[%d] = %v, want %v", i, p["w"][i], want[i])
		}
	}
	// SGD with momentum: buf = g on step 1, then m·buf + g.
	q := Params{"w": {1}}
	s := &SGD{LR: 0.1, Momentum: 0.9}
	s.Step(q, Params{"w": {1}})
	s.Step(q, Params{"w": {1}})
	if want := 1 - 0.1*1 - 0.1*1.9; math.Abs(q["w"][0]-want) > 1e-12 {
		t.Errorf("SGD w = %v, want %v", q["w"][0], want)
	}
}
