package worker

import (
	"hash/fnv"
	"math"
	"time"
)

// Overlap measures how much of a step's communication ran behind compute.
type Overlap struct {
	// CommMs is the time from the first bucket's start to the last one's
	// end.
	CommMs float64
	// ExposedMs is the part of it after the backward pass ended: what the
	// step waited for.
	ExposedMs float64
	// Hidden is the share of CommMs that overlapped compute, in [0, 1].
	Hidden float64
}

// MeasureOverlap computes the overlap from the first bucket start, the end
// of the backward pass and the last bucket's end.
func MeasureOverlap(firstStart, backwardEnd, lastEnd time.Time) Overlap {
	if firstStart.IsZero() || lastEnd.Before(firstStart) {
		return Overlap{}
	}
	comm := lastEnd.Sub(firstStart)
	exposed := lastEnd.Sub(backwardEnd)
	if exposed < 0 {
		exposed = 0
	}
	if exposed > comm {
		exposed = comm
	}
	o := Overlap{CommMs: msOf(comm), ExposedMs: msOf(exposed)}
	if comm > 0 {
		o.Hidden = 1 - float64(exposed)/float64(comm)
	}
	return o
}

func msOf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// Checksum is a 64-bit FNV-1a hash of the float32 bits of w: replicas that
// applied the same updates have equal checksums, and a single flipped bit
// changes it.
func Checksum(w []float32) uint64 {
	h := fnv.New64a()
	var b [4096]byte
	for len(w) > 0 {
		n := min(len(w), len(b)/4)
		for i, v := range w[:n] {
			u := math.Float32bits(v)
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		h.Write(b[:4*n])
		w = w[n:]
	}
	return h.Sum64()
}
