package data

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// The random streams below use only PCG's Uint64, whose algorithm
// (PCG-DXSM) is fixed, and derive everything else here: math/rand/v2 does
// not promise that Perm, IntN or NormFloat64 keep their exact outputs across
// Go releases, and a resumed run must see the same data order.

// mix is SplitMix64's finaliser, used to spread (seed, stream) pairs that
// differ in one bit into unrelated PCG states.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// newRNG returns the generator of stream number stream under seed.
func newRNG(seed, stream uint64) *rand.PCG {
	return rand.NewPCG(mix(seed^mix(stream)), mix(stream+0x632be59bd9b4e019))
}

// bounded returns a uniform integer in [0, n), n > 0, by Lemire's
// multiply-and-reject method (no modulo bias).
func bounded(r *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// uniform returns a float64 in (0, 1): 53 random bits, offset by half a step
// so that it is never 0 (log(0) in normal).
func uniform(r *rand.PCG) float64 {
	return (float64(r.Uint64()>>11) + 0.5) * 0x1p-53
}

// normal returns a standard normal deviate (Box–Muller, cosine branch).
func normal(r *rand.PCG) float64 {
	u1, u2 := uniform(r), uniform(r)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
