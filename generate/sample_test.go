package generate

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// logitsOf is the logits of the distribution p (log p, −Inf for 0).
func logitsOf(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, q := range p {
		out[i] = float32(math.Log(q))
	}
	return out
}

func nearly(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for i := range want {
		// The distributions go through float32 logits: 1e-6 covers their
		// rounding (about 6e-8 relative) many times over.
		if math.Abs(got[i]-want[i]) > 1e-6 {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

// TestDistribution: temperature, top-k and top-p cut a fixed distribution
// to the support Hugging Face's warpers leave, normalised again.
func TestDistribution(t *testing.T) {
	// Ids 0-4 have probabilities 1/16, 1/2, 1/16, 1/4, 1/8.
	base := logitsOf(1.0/16, 1.0/2, 1.0/16, 1.0/4, 1.0/8)
	for _, c := range []struct {
		name string
		o    Options
		want []float64
	}{
		{"as is", Options{Temperature: 1}, []float64{1.0 / 16, 1.0 / 2, 1.0 / 16, 1.0 / 4, 1.0 / 8}},
		{"greedy", Options{}, []float64{0, 1, 0, 0, 0}},
		// p^(1/2) normalised: 1/4, 1/√2, 1/4, 1/2, 1/√8 over their sum.
		{"temperature 2", Options{Temperature: 2}, norm(0.25, 1/math.Sqrt2, 0.25, 0.5, 1/math.Sqrt(8))},
		{"top-k 1", Options{Temperature: 1, TopK: 1}, []float64{0, 1, 0, 0, 0}},
		{"top-k 2", Options{Temperature: 1, TopK: 2}, []float64{0, 2.0 / 3, 0, 1.0 / 3, 0}},
		// The 4th largest ties with the 5th: both stay.
		{"top-k 4 keeps ties", Options{Temperature: 1, TopK: 4}, []float64{1.0 / 16, 1.0 / 2, 1.0 / 16, 1.0 / 4, 1.0 / 8}},
		{"top-k 3", Options{Temperature: 1, TopK: 3}, []float64{0, 4.0 / 7, 0, 2.0 / 7, 1.0 / 7}},
		{"top-k past the vocabulary", Options{Temperature: 1, TopK: 9}, []float64{1.0 / 16, 1.0 / 2, 1.0 / 16, 1.0 / 4, 1.0 / 8}},
		// Decreasing: 1/2, 1/4, 1/8, 1/16, 1/16. The head that reaches p:
		{"top-p 0.5", Options{Temperature: 1, TopP: 0.5}, []float64{0, 1, 0, 0, 0}},
		{"top-p 0.6", Options{Temperature: 1, TopP: 0.6}, []float64{0, 2.0 / 3, 0, 1.0 / 3, 0}},
		{"top-p 0.8", Options{Temperature: 1, TopP: 0.8}, []float64{0, 4.0 / 7, 0, 2.0 / 7, 1.0 / 7}},
		{"top-p 0.01", Options{Temperature: 1, TopP: 0.01}, []float64{0, 1, 0, 0, 0}},
		{"top-p 1", Options{Temperature: 1, TopP: 1}, []float64{1.0 / 16, 1.0 / 2, 1.0 / 16, 1.0 / 4, 1.0 / 8}},
		// Top-k first (1/2, 1/4, 1/8 → 4/7, 2/7, 1/7), then top-p 0.7.
		{"top-k 3 then top-p 0.7", Options{Temperature: 1, TopK: 3, TopP: 0.7}, []float64{0, 2.0 / 3, 0, 1.0 / 3, 0}},
	} {
		c.o.MaxNewTokens = 1
		got, err := Distribution(base, c.o)
		if err != nil {
			t.Fatal(err)
		}
		nearly(t, c.name, got, c.want)
	}
}

func norm(p ...float64) []float64 {
	var s float64
	for _, q := range p {
		s += q
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// TestSamplerSupport: 20000 draws with top-k 3 and top-p 0.8 from 50
// tokens land only on the tokens the cut keeps, each as often as its
// probability says (within 5 standard deviations of a binomial count).
func TestSamplerSupport(t *testing.T) {
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) * 3
	}
	for _, o := range []Options{
		{MaxNewTokens: 1, Temperature: 1, TopK: 3, Seed: 1},
		{MaxNewTokens: 1, Temperature: 0.7, TopP: 0.8, Seed: 2},
		{MaxNewTokens: 1, Temperature: 1.3, TopK: 10, TopP: 0.5, Seed: 3},
	} {
		p, err := Distribution(logits, o)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSampler(o)
		if err != nil {
			t.Fatal(err)
		}
		const draws = 20000
		count := make([]int, len(logits))
		for range draws {
			id, err := s.Next(logits)
			if err != nil {
				t.Fatal(err)
			}
			count[id]++
		}
		support := 0
		for id, q := range p {
			if q == 0 {
				if count[id] > 0 {
					t.Errorf("%+v: token %d, cut off, drawn %d times", o, id, count[id])
				}
				continue
			}
			support++
			mean, sd := draws*q, math.Sqrt(draws*q*(1-q))
			if math.Abs(float64(count[id])-mean) > 5*sd+1 {
				t.Errorf("%+v: token %d drawn %d times, expected %.0f ± %.0f", o, id, count[id], mean, sd)
			}
		}
		if support < 2 || (o.TopK > 0 && support > o.TopK) {
			t.Errorf("%+v: a support of %d tokens", o, support)
		}
	}
}

// TestSamplerSeeds: a seed draws the same tokens every time; another seed
// other tokens.
func TestSamplerSeeds(t *testing.T) {
	flat := make([]float32, 64)
	draw := func(seed uint64) []int32 {
		s, err := NewSampler(Options{MaxNewTokens: 1, Temperature: 1, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for range 32 {
			id, err := s.Next(flat)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	a := draw(1)
	if b := draw(1); !slices.Equal(a, b) {
		t.Errorf("seed 1: %v, then %v", a, b)
	}
	if c := draw(2); slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 both drew %v", a)
	}
}

// TestGreedyAndBadLogits: greedy takes the lowest id of equal maxima;
// NaN logits and all-−Inf logits are errors, −Inf ones are never drawn.
func TestGreedyAndBadLogits(t *testing.T) {
	s, _ := NewSampler(Options{MaxNewTokens: 1})
	if id, err := s.Next([]float32{1, 3, 2, 3}); id != 1 || err != nil {
		t.Errorf("greedy over 1, 3, 2, 3: %d, %v", id, err)
	}
	inf := float32(math.Inf(-1))
	for _, o := range []Options{{MaxNewTokens: 1}, {MaxNewTokens: 1, Temperature: 1}} {
		s, _ := NewSampler(o)
		for _, bad := range [][]float32{{1, float32(math.NaN())}, {inf, inf}, {}} {
			if _, err := s.Next(bad); !errors.Is(err, ErrLogits) {
				t.Errorf("%+v over %v: %v", o, bad, err)
			}
		}
		for range 100 {
			if id, err := s.Next([]float32{inf, 0, inf, 0}); err != nil || id%2 != 1 {
				t.Fatalf("%+v over −Inf, 0, −Inf, 0: %d, %v", o, id, err)
			}
		}
	}
}
