package data

import "fmt"

// maxSyntheticValues caps the values a synthetic dataset materialises
// (1 GiB of float32), so a typo in n or features fails fast instead of
// exhausting memory.
const maxSyntheticValues = 1 << 28

// syntheticMLP builds the synthetic-mlp dataset: features are standard
// normal; the label of x is argmax_k (W x)_k for a random normal "teacher"
// matrix W (classes × features). Labels are thus random but learnable (a
// linear model can reach 100%), so loss curves mean something in tests and
// examples; benchmarks only see the shapes. Sample i (train rows 0…n-1,
// then test rows) is drawn from its own stream (seed, i+1), the teacher
// from (seed, 0), so a sample does not depend on n.
func syntheticMLP(o Options) (Dataset, Dataset, error) {
	f := orDefault(o.Features, 784)
	k := orDefault(o.Classes, 10)
	n := orDefault(o.Samples, 2048)
	m := orDefault(o.TestSamples, max(n/4, 1))
	if int64(n+m)*int64(f) > maxSyntheticValues {
		return nil, nil, fmt.Errorf("%w: synthetic-mlp with %d samples × %d features is over the %d-value limit",
			ErrOptions, n+m, f, maxSyntheticValues)
	}
	w := make([]float64, k*f)
	tr := newRNG(o.Seed, 0)
	for i := range w {
		w[i] = normal(tr)
	}
	gen := func(name string, first, count int) *denseSet {
		s := &denseSet{name: name, n: count, features: f, classes: k,
			x: make([]float32, count*f), y: make([]int32, count)}
		for r := range count {
			rng := newRNG(o.Seed, uint64(first+r)+1)
			x := s.x[r*f : (r+1)*f]
			for j := range x {
				x[j] = float32(normal(rng))
			}
			best, bestScore := 0, 0.0
			for c := range k {
				var score float64
				for j, v := range x {
					score += w[c*f+j] * float64(v)
				}
				if c == 0 || score > bestScore {
					best, bestScore = c, score
				}
			}
			s.y[r] = int32(best)
		}
		return s
	}
	return gen("synthetic-mlp/train", 0, n), gen("synthetic-mlp/test", n, m), nil
}

// syntheticTokens builds the synthetic-tokens dataset: uniform random token
// ids (vocabulary 65 by default, like shakespeare_char), served as windows
// like a text corpus. Train and test streams come from streams 1 and 2.
func syntheticTokens(o Options) (Dataset, Dataset, error) {
	v := orDefault(o.Classes, 65)
	c := o.Context
	n := orDefault(o.Samples, 1024)
	m := orDefault(o.TestSamples, max(n/4, 1))
	if int64(n+m)*int64(c) > maxSyntheticValues {
		return nil, nil, fmt.Errorf("%w: synthetic-tokens with %d samples × context %d is over the %d-token limit",
			ErrOptions, n+m, c, maxSyntheticValues)
	}
	stream := func(name string, id uint64, windows int) *tokenSet {
		rng := newRNG(o.Seed, id)
		toks := make([]int32, windows*c+1)
		for i := range toks {
			toks[i] = int32(bounded(rng, uint64(v)))
		}
		return &tokenSet{name: name, toks: toks, ctx: c, vocab: v}
	}
	return stream("synthetic-tokens/train", 1, n), stream("synthetic-tokens/test", 2, m), nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
