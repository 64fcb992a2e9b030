package generate

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// wideGPT is a GPT of context 24 whose weights are drawn wide (N(0, 0.3²)
// added to its init) so that its logits spread over several units: its
// greedy choices are far from ties and a wrong position or a stale cache
// row changes them.
func wideGPT(t *testing.T, untied bool) *nn.Model {
	t.Helper()
	m, err := models.NewGPT(cpu.New(1), models.GPT{Vocab: 29, Context: 24, DModel: 32, Layers: 2, Heads: 4, Untied: untied}, 3)
	if err != nil {
		t.Fatal(err)
	}
	w := m.Set.HostWeights()
	r := rand.New(rand.NewPCG(11, 12))
	for i := range w {
		w[i] += float32(0.3 * r.NormFloat64())
	}
	if err := m.Set.SetHostWeights(w); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCacheMatchesRecompute: over a whole context (a prompt of 5 tokens,
// then one token per step), the logits of the KV-cache path and of the
// full recompute differ by at most 1e-5 of the largest logit at every
// step. Not bit for bit: the two run the same products, but the cached
// attention's GEMMs span the positions so far where the full pass spans
// the whole context with masked zeros, and the LM head runs on one row
// instead of 24, so float32 sums are blocked differently (a few ulp;
// measured here at most ~1e-6 relative). Greedy and seeded sampling then
// choose the same tokens on both paths.
func TestCacheMatchesRecompute(t *testing.T) {
	for _, untied := range []bool{false, true} {
		m := wideGPT(t, untied)
		lm := m.Spec.(nn.CausalLM)
		dec, err := lm.NewDecoder(m, m.Context)
		if err != nil {
			t.Fatal(err)
		}
		c, f := &cached{dec: dec, c: evalCtx(m)}, newFull(m)
		r := rand.New(rand.NewPCG(5, 6))
		seq := make([]int32, m.Context)
		for i := range seq {
			seq[i] = int32(r.IntN(m.Classes))
		}
		var worst float64
		for at, n := 0, 5; at < len(seq); at, n = at+n, 1 {
			a, err := c.next(seq[at : at+n])
			if err != nil {
				t.Fatal(err)
			}
			b, err := f.next(seq[at : at+n])
			if err != nil {
				t.Fatal(err)
			}
			var scale, diff float64
			for j := range a {
				scale = max(scale, math.Abs(float64(b[j])))
				diff = max(diff, math.Abs(float64(a[j]-b[j])))
			}
			if diff > 1e-5*scale {
				t.Errorf("untied=%v, after %d tokens: logits differ by %g (largest %g)", untied, at+n, diff, scale)
			}
			worst = max(worst, diff/scale)
		}
		dec.Close()
		t.Logf("untied=%v: largest difference %.2g of the largest logit", untied, worst)

		prompt := seq[:5]
		for _, o := range []Options{
			{MaxNewTokens: m.Context - 5},
			{MaxNewTokens: m.Context - 5, Temperature: 0.9, TopK: 10, TopP: 0.95, Seed: 42},
		} {
			got, err := Generate(context.Background(), m, prompt, o)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Recompute(context.Background(), m, prompt, o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("untied=%v, %+v: the cache path gives %v, the recompute %v", untied, o, got, want)
			}
		}
	}
}

// TestSeededGeneration: the same seed gives the same tokens, run after
// run; other seeds give other tokens; greedy decoding ignores the seed.
func TestSeededGeneration(t *testing.T) {
	m := wideGPT(t, false)
	prompt := []int32{3, 1, 4}
	gen := func(o Options) []int32 {
		t.Helper()
		ids, err := Generate(context.Background(), m, prompt, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != o.MaxNewTokens {
			t.Fatalf("%d tokens, asked for %d", len(ids), o.MaxNewTokens)
		}
		return ids
	}
	o := Options{MaxNewTokens: 20, Temperature: 1.5, Seed: 7}
	first := gen(o)
	if again := gen(o); !slices.Equal(first, again) {
		t.Errorf("seed 7 gave %v, then %v", first, again)
	}
	for _, seed := range []uint64{8, 9, 1 << 40} {
		o.Seed = seed
		if other := gen(o); slices.Equal(first, other) {
			t.Errorf("seeds 7 and %d both gave %v", seed, first)
		}
	}
	g := Options{MaxNewTokens: 20, Seed: 1}
	greedy := gen(g)
	g.Seed = 2
	if other := gen(g); !slices.Equal(greedy, other) {
		t.Errorf("greedy decoding changed with the seed: %v, %v", greedy, other)
	}
}

// TestBounds: a request past the context is a *ContextError naming the
// numbers, before any work; prompts the model cannot read and models that
// cannot generate are refused.
func TestBounds(t *testing.T) {
	m := wideGPT(t, false)
	ctx := context.Background()
	for _, gen := range []func(context.Context, *nn.Model, []int32, Options) ([]int32, error){Generate, Recompute} {
		_, err := gen(ctx, m, make([]int32, 20), Options{MaxNewTokens: 5})
		var ce *ContextError
		if !errors.As(err, &ce) || !errors.Is(err, ErrContext) || *ce != (ContextError{Prompt: 20, MaxNew: 5, Context: 24}) {
			t.Errorf("20 + 5 tokens in a context of 24: %v", err)
		} else {
			t.Log(err)
		}
		if ids, err := gen(ctx, m, make([]int32, 20), Options{MaxNewTokens: 4}); err != nil || len(ids) != 4 {
			t.Errorf("20 + 4 tokens in a context of 24: %v, %v", ids, err)
		}
		for _, p := range [][]int32{nil, {1, 29}, {-1}} {
			if _, err := gen(ctx, m, p, Options{MaxNewTokens: 1}); !errors.Is(err, ErrPrompt) {
				t.Errorf("prompt %v: %v", p, err)
			}
		}
		for _, o := range []Options{{}, {MaxNewTokens: 1, Temperature: -1}, {MaxNewTokens: 1, TopP: 1.5}, {MaxNewTokens: 1, TopP: -0.1}, {MaxNewTokens: 1, TopK: -1}} {
			if _, err := gen(ctx, m, []int32{1}, o); !errors.Is(err, ErrOptions) {
				t.Errorf("%+v: %v", o, err)
			}
		}
		mlp, err := models.NewMLP(cpu.New(1), models.MLP{Sizes: []int{4, 3}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gen(ctx, mlp, []int32{1}, Options{MaxNewTokens: 1}); !errors.Is(err, ErrModel) {
			t.Errorf("an MLP: %v", err)
		}
		stage, err := nn.Build(cpu.New(1), m.Spec, 1, 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gen(ctx, stage, []int32{1}, Options{MaxNewTokens: 1}); !errors.Is(err, ErrModel) {
			t.Errorf("a pipeline stage: %v", err)
		}
	}
}

// TestStreamAndCancel: OnToken sees every token in order, its error stops
// the generation, and a cancelled context stops it between tokens.
func TestStreamAndCancel(t *testing.T) {
	m := wideGPT(t, false)
	var seen []int32
	stop := errors.New("enough")
	o := Options{MaxNewTokens: 10, OnToken: func(id int32) error {
		seen = append(seen, id)
		if len(seen) == 3 {
			return stop
		}
		return nil
	}}
	ids, err := Generate(context.Background(), m, []int32{2}, o)
	if !errors.Is(err, stop) || len(ids) != 3 || !slices.Equal(ids, seen) {
		t.Errorf("stopped after 3: %v, %v (streamed %v)", ids, err, seen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ids, err := Generate(ctx, m, []int32{2}, Options{MaxNewTokens: 10}); !errors.Is(err, context.Canceled) || len(ids) != 0 {
		t.Errorf("cancelled: %v, %v", ids, err)
	}
}

// TestLoad: weights saved by name load into a model built from the same
// Spec and generate what the original does; another shape's weights, and
// an untied head's into a tied model, are refused.
func TestLoad(t *testing.T) {
	m := wideGPT(t, true)
	dir := t.TempDir()
	path := filepath.Join(dir, "gpt.safetensors")
	if err := m.Set.SaveWeights(path, nil); err != nil {
		t.Fatal(err)
	}
	l, err := Load(cpu.New(1), m.Spec, path)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{MaxNewTokens: 12, Temperature: 0.8, Seed: 3}
	a, _ := Generate(context.Background(), m, []int32{5, 6}, o)
	b, err := Generate(context.Background(), l, []int32{5, 6}, o)
	if err != nil || !slices.Equal(a, b) {
		t.Errorf("loaded weights generate %v (%v), the original %v", b, err, a)
	}
	for _, change := range []func(*models.GPT){
		func(g *models.GPT) { g.Layers = 3 },
		func(g *models.GPT) { g.Layers = 1 },
		func(g *models.GPT) { g.DModel = 16 },
		func(g *models.GPT) { g.Untied = false },
	} {
		other := m.Spec.(models.GPT)
		change(&other)
		if _, err := Load(cpu.New(1), other, path); !errors.Is(err, nn.ErrStateDict) {
			t.Errorf("the weights of %+v into %+v: %v", m.Spec, other, err)
		}
	}
}
