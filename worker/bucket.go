package worker

import (
	"fmt"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/nn"
)

// Bucket is a contiguous range of the flat gradient buffer, holding the
// gradients of parameters [FirstParam, EndParam) in forward order.
type Bucket struct {
	FirstParam, EndParam int
	// Lo and Hi are the flat element range [Lo, Hi).
	Lo, Hi int
}

// Len is the number of elements.
func (b Bucket) Len() int { return b.Hi - b.Lo }

// Plan assigns a parameter set's gradients to buckets, in the order they are
// all-reduced (reverse layer order, as backward produces them). Every rank
// builds the same plan from the same model and cap.
type Plan struct {
	Buckets []Bucket
	index   map[*nn.Param]int
	bucket  []int // parameter index → bucket
	params  int
}

// NewPlan buckets s's gradients under capBytes per bucket (≤ 0: 25 MiB,
// PyTorch's default).
func NewPlan(s *nn.ParamSet, capBytes int64) (*Plan, error) {
	ps := s.Params()
	sizes := make([]int64, len(ps))
	for i, p := range ps {
		sizes[i] = 4 * int64(p.Size())
	}
	bs, err := collective.AssignBuckets(sizes, capBytes)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	pl := &Plan{index: make(map[*nn.Param]int, len(ps)), bucket: make([]int, len(ps)), params: len(ps)}
	for i, p := range ps {
		pl.index[p] = i
	}
	for k, b := range bs {
		last := ps[b.Hi-1]
		pl.Buckets = append(pl.Buckets, Bucket{FirstParam: b.Lo, EndParam: b.Hi, Lo: ps[b.Lo].Offset, Hi: last.Offset + last.Size()})
		for i := b.Lo; i < b.Hi; i++ {
			pl.bucket[i] = k
		}
	}
	return pl, nil
}

// Tracker follows one backward pass: parameters report their gradients
// final, and it answers which buckets may start their all-reduce now.
// Buckets start strictly in plan order, so every rank issues the same
// collectives in the same order even if gradients became final in a
// different order (as PyTorch DDP does).
//
// A Tracker is owned by one goroutine.
type Tracker struct {
	plan     *Plan
	pending  []int  // parameters not yet ready, per bucket
	seen     []bool // parameter ready in this pass
	next     int    // next bucket to start
	deferred int    // a bucket the order skips (−1: none)
}

// NewTracker returns a tracker ready for a first pass.
func NewTracker(p *Plan) *Tracker {
	t := &Tracker{plan: p, pending: make([]int, len(p.Buckets)), seen: make([]bool, p.params), deferred: -1}
	t.Reset()
	return t
}

// Reset starts a new backward pass.
func (t *Tracker) Reset() {
	for k, b := range t.plan.Buckets {
		t.pending[k] = b.EndParam - b.FirstParam
	}
	clear(t.seen)
	t.next = 0
}

// Ready marks p's gradient final and appends to dst the buckets that may
// start now, in order. A parameter reported twice in one pass is an error
// (a layer double-counting its gradient).
func (t *Tracker) Ready(p *nn.Param, dst []int) ([]int, error) {
	i, ok := t.plan.index[p]
	if !ok {
		return dst, fmt.Errorf("worker: parameter %q is not in the plan", p.Name)
	}
	if t.seen[i] {
		return dst, fmt.Errorf("worker: gradient of %q reported twice in one backward pass", p.Name)
	}
	t.seen[i] = true
	t.pending[t.plan.bucket[i]]--
	for t.next < len(t.pending) && (t.pending[t.next] == 0 || t.next == t.deferred) {
		if t.next != t.deferred {
			dst = append(dst, t.next)
		}
		t.next++
	}
	return dst, nil
}

// Defer takes bucket k out of the order: Ready never returns it, and the
// buckets after it start without waiting for it (its owner starts it
// later, on every rank at the same point). −1 defers none.
func (t *Tracker) Defer(k int) { t.deferred = k }

// BucketOf is the bucket holding p's gradient.
func (p *Plan) BucketOf(q *nn.Param) int { return p.bucket[p.index[q]] }

// Done reports whether every bucket has started.
func (t *Tracker) Done() bool { return t.next == len(t.pending) }
