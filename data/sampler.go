package data

import (
	"fmt"
	"math"
)

// Cursor counts the samples consumed from a Sampler's stream since the
// start of training, over all ranks together. With the Sampler's (N, seed,
// shuffle) it is the whole data-order state: epoch = cursor / N, position
// in the epoch = cursor mod N. It is a plain integer so that it travels in
// RunStep messages and checkpoint manifests as a JSON number.
type Cursor uint64

// Sampler maps cursors to sample indices. The stream is the concatenation
// of epochs; epoch e is a permutation of [0, N) derived only from (seed, e)
// by a Fisher–Yates shuffle on its own PCG stream, or the identity when
// shuffle is off. Batches may straddle an epoch boundary (nothing is
// dropped or padded), so with shuffle off step t of global batch B reads
// rows t·B … t·B+B−1 mod N.
//
// Every rank holds its own Sampler with the same (N, seed, shuffle) and
// reads its share of the global batch at the step's cursor with Shard, so
// ranks agree without talking and a re-split after rescaling (new P, same
// cursor) neither repeats nor skips a sample within the epoch.
//
// Up to MaxCachedPerm samples, a Sampler caches the permutations of the
// two epochs it used last (4 bytes a sample each). Over that — a token
// corpus of billions of tokens — it computes each epoch's permutation one
// index at a time with a keyed Feistel network instead (perm.go), so that
// its memory does not grow with the corpus; that permutation is another
// one than the shuffle's, and the order of every corpus up to
// MaxCachedPerm samples is unchanged. A Sampler is not safe for
// concurrent use.
type Sampler struct {
	n       int
	seed    uint64
	shuffle bool
	cur     Cursor
	cache   [2]epochPerm
	next    int // cache slot to evict next
	// onTheFly: permute with feistels, not cached permutations.
	onTheFly bool
	feistels [2]*feistel
	epochs   [2]uint64 // the epochs of feistels
}

// MaxCachedPerm is the largest sampler whose epochs are shuffled into
// cached permutations (Fisher–Yates); larger ones permute on the fly.
const MaxCachedPerm = 1 << 20

type epochPerm struct {
	epoch uint64
	perm  []uint32 // nil: slot empty
}

// NewSampler returns a Sampler over n samples at cursor 0.
func NewSampler(n int, seed uint64, shuffle bool) (*Sampler, error) {
	if n < 1 || uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: sampler over %d samples, want 1 to %d", ErrOptions, n, uint32(math.MaxUint32))
	}
	return newSampler(n, seed, shuffle, n > MaxCachedPerm), nil
}

func newSampler(n int, seed uint64, shuffle, onTheFly bool) *Sampler {
	return &Sampler{n: n, seed: seed, shuffle: shuffle, onTheFly: onTheFly}
}

// Len returns N, the number of samples per epoch.
func (s *Sampler) Len() int { return s.n }

// Cursor returns the current cursor.
func (s *Sampler) Cursor() Cursor { return s.cur }

// Seek sets the cursor (to resume, or to follow the coordinator's).
func (s *Sampler) Seek(c Cursor) { s.cur = c }

// Epoch returns the epoch the cursor is in.
func (s *Sampler) Epoch() uint64 { return uint64(s.cur) / uint64(s.n) }

// Next returns the next n sample indices and advances the cursor by n. The
// result is dst[:0] with the indices appended.
func (s *Sampler) Next(n int, dst []int) []int {
	dst = s.At(s.cur, n, dst)
	s.cur += Cursor(n)
	return dst
}

// At returns the n sample indices starting at cursor c, appended to dst[:0],
// without moving the Sampler's cursor.
func (s *Sampler) At(c Cursor, n int, dst []int) []int {
	dst = dst[:0]
	N := uint64(s.n)
	for n > 0 {
		epoch, pos := uint64(c)/N, uint64(c)%N
		take := min(uint64(n), N-pos)
		switch {
		case !s.shuffle:
			for i := pos; i < pos+take; i++ {
				dst = append(dst, int(i))
			}
		case s.onTheFly:
			f := s.feistel(epoch)
			for i := pos; i < pos+take; i++ {
				dst = append(dst, int(f.at(i)))
			}
		default:
			for _, v := range s.perm(epoch)[pos : pos+take] {
				dst = append(dst, int(v))
			}
		}
		n -= int(take)
		c += Cursor(take)
	}
	return dst
}

// Index returns the sample index at cursor c.
func (s *Sampler) Index(c Cursor) int {
	var one [1]int
	return s.At(c, 1, one[:0])[0]
}

// Shard returns rank's rows of the global batch of size batch that starts at
// cursor c, split over ranks as Split says; the caller advances the cursor
// by batch once per step.
func (s *Sampler) Shard(c Cursor, batch, ranks, rank int, dst []int) []int {
	lo, hi := Split(batch, ranks, rank)
	return s.At(c+Cursor(lo), hi-lo, dst)
}

// Split returns the rows [lo, hi) of a global batch of size batch that rank
// (0-based, of ranks) takes: contiguous blocks, the first batch mod ranks
// ranks one row larger (as numpy.array_split does), so sizes differ by at
// most one and every row is taken once. A rank may get no rows when batch <
// ranks. It panics on ranks < 1, rank outside [0, ranks) or batch < 0.
func Split(batch, ranks, rank int) (lo, hi int) {
	if ranks < 1 || rank < 0 || rank >= ranks || batch < 0 {
		panic(fmt.Sprintf("data: Split(batch=%d, ranks=%d, rank=%d)", batch, ranks, rank))
	}
	q, r := batch/ranks, batch%ranks
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}

// feistel returns epoch's on-the-fly permutation; the last two are kept
// (a batch may straddle two epochs).
func (s *Sampler) feistel(epoch uint64) *feistel {
	for i, f := range s.feistels {
		if f != nil && s.epochs[i] == epoch {
			return f
		}
	}
	s.feistels[1], s.epochs[1] = s.feistels[0], s.epochs[0]
	s.feistels[0], s.epochs[0] = newFeistel(uint64(s.n), s.seed, epoch), epoch
	return s.feistels[0]
}

// perm returns epoch's permutation, from the cache or freshly shuffled.
func (s *Sampler) perm(epoch uint64) []uint32 {
	for i, e := range s.cache {
		if e.perm != nil && e.epoch == epoch {
			s.next = i ^ 1 // keep the slot just used, evict the other
			return e.perm
		}
	}
	slot := &s.cache[s.next]
	s.next ^= 1
	p := slot.perm
	if p == nil {
		p = make([]uint32, s.n)
	}
	for i := range p {
		p[i] = uint32(i)
	}
	// Stream numbers of sampler epochs are kept apart from the synthetic
	// datasets' by the high bit, so the same --seed never reuses a stream.
	rng := newRNG(s.seed, epoch|1<<63)
	for i := len(p) - 1; i > 0; i-- {
		j := bounded(rng, uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	*slot = epochPerm{epoch: epoch, perm: p}
	return p
}

// SamplerState is a Sampler's state as a checkpoint stores it: the cursor,
// and the settings it only makes sense with.
type SamplerState struct {
	N       int    `json:"n"`
	Seed    uint64 `json:"seed"`
	Shuffle bool   `json:"shuffle"`
	Cursor  Cursor `json:"cursor"`
}

// State returns the Sampler's state.
func (s *Sampler) State() SamplerState {
	return SamplerState{N: s.n, Seed: s.seed, Shuffle: s.shuffle, Cursor: s.cur}
}

// Restore seeks to st.Cursor after checking that st was saved by a Sampler
// with the same N, seed and shuffle: a cursor means nothing under other
// settings, and resuming with them would silently repeat or skip samples.
func (s *Sampler) Restore(st SamplerState) error {
	if st.N != s.n || st.Seed != s.seed || st.Shuffle != s.shuffle {
		return fmt.Errorf("%w: saved for n=%d seed=%d shuffle=%v, this sampler has n=%d seed=%d shuffle=%v",
			ErrSamplerState, st.N, st.Seed, st.Shuffle, s.n, s.seed, s.shuffle)
	}
	s.cur = st.Cursor
	return nil
}
