package nn

import "math/rand/v2"

// RNG draws initial weights deterministically from a seed. It is not
// PyTorch's generator: to start from bit-identical weights on both sides,
// pass a safetensors file with --init.
type RNG struct{ r *rand.Rand }

// NewRNG seeds a generator.
func NewRNG(seed uint64) *RNG { return &RNG{r: rand.New(rand.NewPCG(seed, 0x74726f757065))} }

// Uniform returns an initialiser drawing from U(lo, hi).
func (g *RNG) Uniform(lo, hi float32) func([]float32) {
	return func(w []float32) {
		for i := range w {
			w[i] = lo + (hi-lo)*g.r.Float32()
		}
	}
}

// Normal returns an initialiser drawing from N(mean, std²).
func (g *RNG) Normal(mean, std float32) func([]float32) {
	return func(w []float32) {
		for i := range w {
			w[i] = mean + std*float32(g.r.NormFloat64())
		}
	}
}

// Const returns an initialiser setting every weight to v.
func Const(v float32) func([]float32) {
	return func(w []float32) {
		for i := range w {
			w[i] = v
		}
	}
}
