package generate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampler chooses each next token from a step's logits as its Options
// say, drawing from its own seeded generator: the same sequence of logits
// gives the same tokens. Not safe for concurrent use.
type Sampler struct {
	o     Options
	rng   *rand.Rand
	probs []float64
	order []int
}

// pcgStream is the second word of the sampler's PCG state; the seed is
// the first.
const pcgStream = 0x7472_6f75_7065 // "troupe"

// NewSampler returns a sampler for o (validated).
func NewSampler(o Options) (*Sampler, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, pcgStream))}, nil
}

// Next chooses the token that follows logits (one per vocabulary id).
func (s *Sampler) Next(logits []float32) (int32, error) {
	if s.o.Greedy() {
		return argmax(logits)
	}
	p, err := s.distribution(logits)
	if err != nil {
		return 0, err
	}
	u := s.rng.Float64()
	last := -1
	var cum float64
	for id, q := range p {
		if q == 0 {
			continue
		}
		if cum += q; u < cum {
			return int32(id), nil
		}
		last = id
	}
	return int32(last), nil // u within rounding of 1
}

// Distribution is the distribution a token is drawn from after logits
// under o (validated): the softmax of logits/Temperature cut to top-k and
// top-p and normalised again; at Temperature 0, all on the most likely
// token (the lowest id of equals).
func Distribution(logits []float32, o Options) ([]float64, error) {
	s, err := NewSampler(o)
	if err != nil {
		return nil, err
	}
	if o.Greedy() {
		id, err := argmax(logits)
		if err != nil {
			return nil, err
		}
		p := make([]float64, len(logits))
		p[id] = 1
		return p, nil
	}
	p, err := s.distribution(logits)
	return slices.Clone(p), err
}

// argmax is the id of the largest logit, the lowest of equals (as
// torch.argmax on the CPU returns the first).
func argmax(logits []float32) (int32, error) {
	best := -1
	for id, l := range logits {
		if math.IsNaN(float64(l)) {
			return 0, fmt.Errorf("%w: the logit of token %d is NaN", ErrLogits, id)
		}
		if best < 0 || l > logits[best] {
			best = id
		}
	}
	if best < 0 || math.IsInf(float64(logits[best]), -1) {
		return 0, fmt.Errorf("%w: no logits, or every one −Inf", ErrLogits)
	}
	return int32(best), nil
}

// distribution fills s.probs with the warped distribution of logits (in
// float64, so that a vocabulary of any size sums without loss).
func (s *Sampler) distribution(logits []float32) ([]float64, error) {
	top, err := argmax(logits)
	if err != nil {
		return nil, err
	}
	n := len(logits)
	s.probs = slices.Grow(s.probs[:0], n)[:n]
	p := s.probs
	t := s.o.Temperature
	hi := float64(logits[top]) / t
	// Top-k: the k-th largest scaled logit is the cut; ties with it stay
	// (Hugging Face's TopKLogitsWarper keeps every score ≥ it).
	cut := math.Inf(-1)
	if k := s.o.TopK; k > 0 && k < n {
		s.order = s.orderBy(logits)
		cut = float64(logits[s.order[k-1]]) / t
	}
	var sum float64
	for id, l := range logits {
		z := float64(l) / t
		if z < cut || math.IsInf(z, -1) {
			p[id] = 0
			continue
		}
		p[id] = math.Exp(z - hi)
		sum += p[id]
	}
	for id := range p {
		p[id] /= sum
	}
	if s.o.TopP < 1 {
		s.order = s.orderBy(logits)
		// Keep a token while the mass of the more likely ones is below
		// TopP: the smallest head of the order that reaches it.
		var mass float64
		kept := 0
		for _, id := range s.order {
			if mass >= s.o.TopP && kept > 0 {
				p[id] = 0
				continue
			}
			mass += p[id]
			kept++
		}
		sum = 0
		for _, q := range p {
			sum += q
		}
		for id := range p {
			p[id] /= sum
		}
	}
	return p, nil
}

// orderBy returns the ids by decreasing logit, lower ids first among
// equals.
func (s *Sampler) orderBy(logits []float32) []int {
	s.order = slices.Grow(s.order[:0], len(logits))[:len(logits)]
	for i := range s.order {
		s.order[i] = i
	}
	slices.SortStableFunc(s.order, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
	return s.order
}
