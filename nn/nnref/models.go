package nnref

import (
	"fmt"
	"math"
)

// Params is a state dict: PyTorch names to flat float64 weights.
type Params map[string][]float64

// Clone deep-copies p.
func (p Params) Clone() Params {
	q := make(Params, len(p))
	for k, v := range p {
		q[k] = append([]float64(nil), v...)
	}
	return q
}

// MLP is the reference MLP classifier: fc1…fcn with ReLU between.
type MLP struct{ Sizes []int }

// Loss returns the mean cross-entropy of the MLP on x [rows, Sizes[0]]
// against y, and the gradient of every parameter.
func (m MLP) Loss(p Params, x []float64, y []int) (float64, Params) {
	rows := len(y)
	acts := [][]float64{x}  // inputs of each Linear
	pre := [][]float64{nil} // pre-activation outputs
	h := x
	n := len(m.Sizes) - 1
	for i := 1; i <= n; i++ {
		z := Linear(h, p[fmt.Sprintf("fc%d.weight", i)], p[fmt.Sprintf("fc%d.bias", i)], rows, m.Sizes[i-1], m.Sizes[i])
		pre = append(pre, z)
		if i < n {
			h = ReLU(z)
			acts = append(acts, h)
		} else {
			h = z
		}
	}
	loss, d := CrossEntropy(h, y, m.Sizes[n])
	g := Params{}
	for i := n; i >= 1; i-- {
		if i < n {
			d = ReLUBackward(pre[i], d)
		}
		dx, dw, db := LinearBackward(acts[i-1], p[fmt.Sprintf("fc%d.weight", i)], d, rows, m.Sizes[i-1], m.Sizes[i], true)
		g[fmt.Sprintf("fc%d.weight", i)], g[fmt.Sprintf("fc%d.bias", i)] = dw, db
		d = dx
	}
	return loss, g
}

// GPT is the reference GPT (see nn.NewGPT for the architecture).
type GPT struct {
	Vocab, Context, DModel, Layers, Heads int
	Untied                                bool
}

func add(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

func accum(g Params, name string, d []float64) {
	if cur, ok := g[name]; ok {
		for i := range cur {
			cur[i] += d[i]
		}
		return
	}
	g[name] = append([]float64(nil), d...)
}

// Loss returns the mean next-token cross-entropy on tokens [batch·context]
// against targets, and every parameter's gradient.
func (m GPT) Loss(p Params, tokens, targets []int) (float64, Params) {
	T, C, H, V := m.Context, m.DModel, m.Heads, m.Vocab
	B := len(tokens) / T
	rows := B * T
	pos := make([]int, rows)
	for i := range pos {
		pos[i] = i % T
	}
	x := add(Embedding(p["tok.weight"], tokens, C), Embedding(p["pos.weight"], pos, C))
	type blockCache struct {
		x, ln1, m1, r1, x2, ln2, m2, r2, f, gf []float64
		ac                                     *AttentionCache
	}
	caches := make([]blockCache, m.Layers)
	const eps = 1e-5
	for l := 0; l < m.Layers; l++ {
		pre := fmt.Sprintf("blocks.%d.", l)
		bc := blockCache{x: x}
		bc.ln1, bc.m1, bc.r1 = LayerNorm(x, p[pre+"ln1.weight"], p[pre+"ln1.bias"], rows, C, eps)
		att, ac := Attention(bc.ln1, p[pre+"qkv.weight"], p[pre+"qkv.bias"], p[pre+"proj.weight"], p[pre+"proj.bias"], B, T, C, H)
		bc.ac = ac
		bc.x2 = add(x, att)
		bc.ln2, bc.m2, bc.r2 = LayerNorm(bc.x2, p[pre+"ln2.weight"], p[pre+"ln2.bias"], rows, C, eps)
		bc.f = Linear(bc.ln2, p[pre+"fc.weight"], p[pre+"fc.bias"], rows, C, 4*C)
		bc.gf = GELU(bc.f)
		out := Linear(bc.gf, p[pre+"out.weight"], p[pre+"out.bias"], rows, 4*C, C)
		x = add(bc.x2, out)
		caches[l] = bc
	}
	lnf, mf, rf := LayerNorm(x, p["lnf.weight"], p["lnf.bias"], rows, C, eps)
	headName := "tok.weight"
	if m.Untied {
		headName = "head.weight"
	}
	logits := Linear(lnf, p[headName], nil, rows, C, V)
	loss, dlogits := CrossEntropy(logits, targets, V)

	g := Params{}
	dlnf, dhead, _ := LinearBackward(lnf, p[headName], dlogits, rows, C, V, false)
	accum(g, headName, dhead)
	dx, dgf, dbf := LayerNormBackward(x, p["lnf.weight"], mf, rf, dlnf, rows, C)
	accum(g, "lnf.weight", dgf)
	accum(g, "lnf.bias", dbf)
	for l := m.Layers - 1; l >= 0; l-- {
		pre := fmt.Sprintf("blocks.%d.", l)
		bc := caches[l]
		dgfl, dwo, dbo := LinearBackward(bc.gf, p[pre+"out.weight"], dx, rows, 4*C, C, true)
		accum(g, pre+"out.weight", dwo)
		accum(g, pre+"out.bias", dbo)
		df := GELUBackward(bc.f, dgfl)
		dln2, dwf, dbfc := LinearBackward(bc.ln2, p[pre+"fc.weight"], df, rows, C, 4*C, true)
		accum(g, pre+"fc.weight", dwf)
		accum(g, pre+"fc.bias", dbfc)
		dx2, dg2, db2 := LayerNormBackward(bc.x2, p[pre+"ln2.weight"], bc.m2, bc.r2, dln2, rows, C)
		accum(g, pre+"ln2.weight", dg2)
		accum(g, pre+"ln2.bias", db2)
		dx2 = add(dx2, dx)
		dln1, dwqkv, dbqkv, dwp, dbp := AttentionBackward(bc.ln1, p[pre+"qkv.weight"], p[pre+"proj.weight"], bc.ac, dx2, B, T, C, H)
		accum(g, pre+"qkv.weight", dwqkv)
		accum(g, pre+"qkv.bias", dbqkv)
		accum(g, pre+"proj.weight", dwp)
		accum(g, pre+"proj.bias", dbp)
		dxl, dg1, db1 := LayerNormBackward(bc.x, p[pre+"ln1.weight"], bc.m1, bc.r1, dln1, rows, C)
		accum(g, pre+"ln1.weight", dg1)
		accum(g, pre+"ln1.bias", db1)
		dx = add(dxl, dx2)
	}
	accum(g, "tok.weight", EmbeddingBackward(dx, tokens, V, C))
	accum(g, "pos.weight", EmbeddingBackward(dx, pos, T, C))
	return loss, g
}

// SGD is torch.optim.SGD over a state dict.
type SGD struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	buf                                  Params
}

// Step updates p in place from g.
func (o *SGD) Step(p, g Params) {
	first := o.buf == nil
	if first {
		o.buf = Params{}
	}
	for k, w := range p {
		gr := g[k]
		for i := range w {
			d := gr[i] + o.WeightDecay*w[i]
			if o.Momentum != 0 {
				if first {
					if o.buf[k] == nil {
						o.buf[k] = make([]float64, len(w))
					}
					o.buf[k][i] = d
				} else {
					o.buf[k][i] = o.Momentum*o.buf[k][i] + (1-o.Dampening)*d
				}
				if o.Nesterov {
					d += o.Momentum * o.buf[k][i]
				} else {
					d = o.buf[k][i]
				}
			}
			w[i] -= o.LR * d
		}
	}
}

// AdamW is torch.optim.AdamW over a state dict.
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	m, v                               Params
	t                                  int
}

// Step updates p in place from g; lr overrides LR when positive.
func (o *AdamW) Step(p, g Params, lr float64) {
	if lr <= 0 {
		lr = o.LR
	}
	if o.m == nil {
		o.m, o.v = Params{}, Params{}
	}
	o.t++
	bc1 := 1 - math.Pow(o.Beta1, float64(o.t))
	bc2 := 1 - math.Pow(o.Beta2, float64(o.t))
	for k, w := range p {
		if o.m[k] == nil {
			o.m[k], o.v[k] = make([]float64, len(w)), make([]float64, len(w))
		}
		m, v, gr := o.m[k], o.v[k], g[k]
		for i := range w {
			w[i] *= 1 - lr*o.WeightDecay
			m[i] = o.Beta1*m[i] + (1-o.Beta1)*gr[i]
			v[i] = o.Beta2*v[i] + (1-o.Beta2)*gr[i]*gr[i]
			w[i] -= lr * (m[i] / bc1) / (math.Sqrt(v[i]/bc2) + o.Eps)
		}
	}
}
