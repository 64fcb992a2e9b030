package data

import "math/bits"

// feistel is a pseudo-random permutation of [0, n) computed one index at a
// time, in constant memory: a balanced Feistel network on the smallest
// even number of bits that holds n, with cycle walking (an output ≥ n is
// permuted again until it lands in [0, n); the network is a bijection of
// its 2^bits values, so walking the cycle from an index < n reaches
// another index < n, and distinct inputs reach distinct outputs). 2^bits
// < 4n, so a walk takes fewer than 4 rounds of the network on average.
type feistel struct {
	n    uint64
	half uint   // bits of each half
	mask uint64 // 2^half − 1
	keys [feistelRounds]uint64
}

// feistelRounds: 4 rounds make a Feistel network a strong pseudo-random
// permutation (Luby–Rackoff); 6 keep small domains well mixed too.
const feistelRounds = 6

// newFeistel returns the permutation of [0, n) keyed by (seed, epoch).
func newFeistel(n, seed, epoch uint64) *feistel {
	b := max(uint(bits.Len64(n-1)), 2)
	b += b & 1
	f := &feistel{n: n, half: b / 2, mask: 1<<(b/2) - 1}
	// Keys come from the same (seed, epoch) stream the Fisher–Yates
	// shuffle of smaller samplers uses.
	rng := newRNG(seed, epoch|1<<63)
	for i := range f.keys {
		f.keys[i] = rng.Uint64()
	}
	return f
}

// at returns the image of i < n.
func (f *feistel) at(i uint64) uint64 {
	x := i
	for {
		l, r := x>>f.half, x&f.mask
		for _, k := range f.keys {
			l, r = r, l^(mix(r^k)&f.mask)
		}
		x = l<<f.half | r
		if x < f.n {
			return x
		}
	}
}
