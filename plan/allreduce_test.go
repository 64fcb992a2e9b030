package plan

import (
	"errors"
	"testing"
)

// Volumes and times below are exact in float64 (small integers and powers
// of ten divided by powers of two) and compared with ==.

func TestAllReduceRing(t *testing.T) {
	cases := []struct {
		s       int64
		p       int
		bw      float64
		perRank float64
		seconds float64
	}{
		// The case: 8 GB over 4 ranks sends 2·3/4·8 = 12 GB per rank.
		{8e9, 4, 25e9, 12e9, 0.48},
		// Two ranks: each sends its half and receives the other's: S.
		{1000, 2, 1000, 1000, 1},
		// One rank sends nothing.
		{1000, 1, 1000, 0, 0},
		// Not divisible by P: the model stays 2(P−1)/P·S, here 2·2·9/3 = 12.
		{9, 3, 4, 12, 3},
		{0, 8, 1, 0, 0},
	}
	for _, c := range cases {
		cfg := DefaultAllReduceConfig(c.s, c.p)
		cfg.Bandwidth = c.bw
		r, err := AllReduce(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.BytesPerRank != c.perRank || r.Seconds == nil || *r.Seconds != c.seconds {
			t.Errorf("ring S=%d P=%d: %v bytes per rank, %v s; want %v, %v", c.s, c.p, r.BytesPerRank, r.Seconds, c.perRank, c.seconds)
		}
		if r.RootBytesSent != nil || r.RootBytesReceived != nil {
			t.Errorf("ring reports root traffic: %+v", r)
		}
	}
}

func TestAllReduceNaive(t *testing.T) {
	r, err := AllReduce(AllReduceConfig{Bytes: 8e9, Ranks: 4, Bandwidth: 25e9, Algorithm: Naive})
	if err != nil {
		t.Fatal(err)
	}
	// The root receives 3·8 GB, sums, and sends 3·8 GB back; the two
	// phases are sequential on its link: 48 GB / 25 GB/s = 1.92 s.
	if r.BytesPerRank != 24e9 || *r.RootBytesSent != 24e9 || *r.RootBytesReceived != 24e9 || *r.Seconds != 1.92 {
		t.Errorf("naive: %+v sent %v received %v seconds %v", r, *r.RootBytesSent, *r.RootBytesReceived, *r.Seconds)
	}
	// The ring is P times faster than the root (2(P−1)/P·S vs 2(P−1)·S).
	ring, _ := AllReduce(AllReduceConfig{Bytes: 8e9, Ranks: 4, Bandwidth: 25e9, Algorithm: Ring})
	if *r.Seconds != 4**ring.Seconds {
		t.Errorf("naive %v s, ring %v s: want a factor of 4", *r.Seconds, *ring.Seconds)
	}
}

func TestAllReduceNoBandwidth(t *testing.T) {
	r, err := AllReduce(DefaultAllReduceConfig(100, 4))
	if err != nil {
		t.Fatal(err)
	}
	if r.Seconds != nil || r.BandwidthBytesPerS != 0 || r.BytesPerRank != 150 {
		t.Errorf("no bandwidth: %+v", r)
	}
}

func TestAllReduceInvalid(t *testing.T) {
	for _, cfg := range []AllReduceConfig{
		{Bytes: -1, Ranks: 2, Algorithm: Ring},
		{Bytes: 1, Ranks: 0, Algorithm: Ring},
		{Bytes: 1, Ranks: -3, Algorithm: Ring},
		{Bytes: 1, Ranks: 2, Bandwidth: -1, Algorithm: Ring},
		{Bytes: 1, Ranks: 2, Algorithm: "tree"},
	} {
		if _, err := AllReduce(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("AllReduce(%+v) error = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := ParseAlgorithm("Ring"); err == nil {
		t.Error("ParseAlgorithm(Ring) accepted a misspelt name")
	}
}
