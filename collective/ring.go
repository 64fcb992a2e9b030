package collective

// The ring order is the standard one (NCCL, Horovod): rank r sends to r+1 and
// receives from r−1. Buffers of n values are cut into P chunks; chunk c is
// ChunkRange(n, P, c).
//
// Reduce-scatter, steps s = 1…P−1: rank r sends chunk (r − s + 1) mod P and
// adds the chunk (r − s) mod P that arrives from r−1 into its own copy. The
// chunk a rank sends at step s+1 is the one it just summed at step s, so after
// P−1 steps rank r holds the sum of every rank's chunk (r + 1) mod P.
//
// All-gather, steps t = 1…P−1: rank r sends chunk (r − t + 2) mod P (at t = 1
// the chunk it owns) and copies the chunk (r − t + 1) mod P that arrives; the
// owned chunks go once around the ring.

// ChunkRange returns the element range [lo, hi) of chunk c when n values are
// split among p ranks in order: the first n mod p chunks hold one value more,
// so sizes that p does not divide work and chunks may be empty when n < p.
func ChunkRange(n, p, c int) (lo, hi int) {
	base, rem := n/p, n%p
	lo = c*base + min(c, rem)
	hi = lo + base
	if c < rem {
		hi++
	}
	return lo, hi
}

// OwnedChunk is the chunk rank r holds fully reduced after the reduce-scatter
// of a ring of p ranks: (r + 1) mod p.
func OwnedChunk(r, p int) int { return mod(r+1, p) }

// ReduceScatterSendChunk is the chunk rank r sends at reduce-scatter step s
// (1-based): (r − s + 1) mod p.
func ReduceScatterSendChunk(r, s, p int) int { return mod(r-s+1, p) }

// ReduceScatterRecvChunk is the chunk rank r receives and adds at
// reduce-scatter step s: (r − s) mod p.
func ReduceScatterRecvChunk(r, s, p int) int { return mod(r-s, p) }

// AllGatherSendChunk is the chunk rank r sends at all-gather step t
// (1-based): (r − t + 2) mod p.
func AllGatherSendChunk(r, t, p int) int { return mod(r-t+2, p) }

// AllGatherRecvChunk is the chunk rank r receives and copies at all-gather
// step t: (r − t + 1) mod p.
func AllGatherRecvChunk(r, t, p int) int { return mod(r-t+1, p) }

func mod(a, p int) int {
	a %= p
	if a < 0 {
		a += p
	}
	return a
}

// subCount is the number of sub-chunks a piece of at most maxLen values is
// cut into so that none exceeds subElems values; at least 1, so that even an
// empty chunk sends one (empty) message and the schedule stays uniform.
func subCount(maxLen, subElems int) int {
	if maxLen <= subElems {
		return 1
	}
	return (maxLen + subElems - 1) / subElems
}

// subRange is the k-th of m near-equal pieces of [lo, hi).
func subRange(lo, hi, m, k int) (a, b int) {
	a, b = ChunkRange(hi-lo, m, k)
	return lo + a, lo + b
}
