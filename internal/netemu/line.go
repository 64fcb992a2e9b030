// Package netemu emulates a slow or lossy network link for tests and
// benchmarks on one machine: a delay line that drops a share of the
// packets at random and holds every other for a fixed time before
// passing it on, in order, the part of Linux's netem a kernel without
// sch_netem lacks (tc's tbf still limits the rate). Line is the
// pure queue; Run is its shell on a TUN device (Linux only), through
// which a router namespace sends the packets it forwards.
package netemu

import (
	"errors"
	"math/rand/v2"
	"time"
)

var (
	// ErrFull is a packet dropped because the line holds Limit packets.
	ErrFull = errors.New("netemu: delay line full, packet dropped")
	// ErrLost is a packet dropped at random (Line.Loss).
	ErrLost = errors.New("netemu: packet lost")
)

// Line holds packets for Delay each and releases them in arrival order.
// It is not safe for concurrent use.
type Line struct {
	// Delay is how long each packet is held; Limit how many packets the
	// line holds at most (a longer queue drops, as netem's limit does).
	Delay time.Duration
	Limit int
	// Loss is the probability that a packet is dropped (0: none), drawn
	// from a generator seeded with Seed, so a test's losses repeat.
	Loss float64
	Seed uint64
	rng  *rand.Rand
	q    []held
}

type held struct {
	due time.Time
	pkt []byte
}

// Push takes a packet that arrived at now (the line keeps pkt: the caller
// must not reuse it).
func (l *Line) Push(pkt []byte, now time.Time) error {
	if l.Loss > 0 {
		if l.rng == nil {
			l.rng = rand.New(rand.NewPCG(l.Seed, 0x6e6574656d75))
		}
		if l.rng.Float64() < l.Loss {
			return ErrLost
		}
	}
	if l.Limit > 0 && len(l.q) >= l.Limit {
		return ErrFull
	}
	l.q = append(l.q, held{due: now.Add(l.Delay), pkt: pkt})
	return nil
}

// Pop returns the next packet if it is due at now; otherwise nil and how
// long until the next is due (0 with none held).
func (l *Line) Pop(now time.Time) ([]byte, time.Duration) {
	if len(l.q) == 0 {
		return nil, 0
	}
	h := l.q[0]
	if wait := h.due.Sub(now); wait > 0 {
		return nil, wait
	}
	l.q[0] = held{}
	l.q = l.q[1:]
	if len(l.q) == 0 {
		l.q = l.q[:0:0] // let the backing array go
	}
	return h.pkt, 0
}

// Len is the number of packets held.
func (l *Line) Len() int { return len(l.q) }
