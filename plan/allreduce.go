package plan

import (
	"fmt"
	"math"
)

// Algorithm names an all-reduce algorithm the model knows.
type Algorithm string

const (
	// Ring is reduce-scatter then all-gather around a ring (NCCL, Horovod):
	// every rank sends and receives 2(P−1)/P·S bytes, so the time per rank
	// hardly grows with P.
	Ring Algorithm = "ring"
	// Naive gathers every buffer at a root, sums, and broadcasts the sum:
	// the root receives (P−1)·S and then sends (P−1)·S, and its link is the
	// bottleneck. It is the baseline the ring is measured against.
	Naive Algorithm = "naive"
)

// ParseAlgorithm accepts "ring" or "naive".
func ParseAlgorithm(s string) (Algorithm, error) {
	switch a := Algorithm(s); a {
	case Ring, Naive:
		return a, nil
	}
	return "", fmt.Errorf("%w: algorithm %q: want ring or naive", ErrInvalidConfig, s)
}

// AllReduceConfig describes one all-reduce of a buffer.
type AllReduceConfig struct {
	// Bytes is the buffer size S that every rank contributes and receives
	// back summed.
	Bytes int64
	// Ranks is the number of participants P.
	Ranks int
	// Bandwidth is each link's bandwidth in bytes per second, the same in
	// both directions at once (full duplex). Zero means "not given": the
	// result has volumes only, no time.
	Bandwidth float64
	// Algorithm is Ring or Naive.
	Algorithm Algorithm
}

// DefaultAllReduceConfig returns a ring all-reduce of s bytes over p ranks
// with no bandwidth.
func DefaultAllReduceConfig(s int64, p int) AllReduceConfig {
	return AllReduceConfig{Bytes: s, Ranks: p, Algorithm: Ring}
}

// Validate reports the first input the model cannot use.
func (c AllReduceConfig) Validate() error {
	if c.Bytes < 0 {
		return fmt.Errorf("%w: size %d must not be negative", ErrInvalidConfig, c.Bytes)
	}
	if c.Ranks <= 0 {
		return fmt.Errorf("%w: ranks %d must be positive", ErrInvalidConfig, c.Ranks)
	}
	if !(c.Bandwidth >= 0) || math.IsInf(c.Bandwidth, 0) {
		return fmt.Errorf("%w: bandwidth %v must be finite and not negative", ErrInvalidConfig, c.Bandwidth)
	}
	if _, err := ParseAlgorithm(string(c.Algorithm)); err != nil {
		return err
	}
	return nil
}

// AllReduceResult is the traffic of one all-reduce and, given a bandwidth,
// its time under a bandwidth-only model (no per-message latency: right for
// the large gradient buffers this is meant for, optimistic for small ones).
type AllReduceResult struct {
	Algorithm Algorithm `json:"algorithm"`
	Bytes     int64     `json:"bytes"`
	Ranks     int       `json:"ranks"`
	// BytesPerRank is what the busiest rank sends: 2(P−1)/P·S for the ring
	// (every rank alike, and it receives as much), (P−1)·S for the naive
	// root.
	BytesPerRank float64 `json:"bytes_per_rank"`
	// RootBytesSent and RootBytesReceived are the naive root's traffic
	// ((P−1)·S each); absent for the ring, which has no root.
	RootBytesSent     *float64 `json:"root_bytes_sent,omitempty"`
	RootBytesReceived *float64 `json:"root_bytes_received,omitempty"`
	// BandwidthBytesPerS and Seconds are present when a bandwidth was
	// given. The ring's sends and receives overlap on a full-duplex link, so
	// it takes BytesPerRank / BW. The naive root's gather must finish
	// before its broadcast starts, so it takes (received + sent) / BW.
	BandwidthBytesPerS float64  `json:"bandwidth_bytes_per_s,omitempty"`
	Seconds            *float64 `json:"seconds,omitempty"`
}

// AllReduce computes the traffic and time of one all-reduce.
func AllReduce(cfg AllReduceConfig) (AllReduceResult, error) {
	if err := cfg.Validate(); err != nil {
		return AllReduceResult{}, err
	}
	s, p := float64(cfg.Bytes), float64(cfg.Ranks)
	r := AllReduceResult{Algorithm: cfg.Algorithm, Bytes: cfg.Bytes, Ranks: cfg.Ranks}
	onLink := 0.0
	switch cfg.Algorithm {
	case Ring:
		r.BytesPerRank = RingBytesPerRank(s, cfg.Ranks)
		onLink = r.BytesPerRank
	case Naive:
		sent, received := (p-1)*s, (p-1)*s
		r.BytesPerRank = sent
		r.RootBytesSent, r.RootBytesReceived = &sent, &received
		onLink = sent + received
	}
	if cfg.Bandwidth > 0 {
		r.BandwidthBytesPerS = cfg.Bandwidth
		sec := onLink / cfg.Bandwidth
		r.Seconds = &sec
	}
	return r, nil
}

// RingBytesPerRank is what each rank sends in a ring all-reduce of s bytes
// over p ranks: (P−1)/P·S in the reduce-scatter and as much again in the
// all-gather.
func RingBytesPerRank(s float64, p int) float64 {
	return 2 * float64(p-1) * s / float64(p)
}
