package nn

import "github.com/troupe-ml/troupe/kernels"

// Pool recycles activation buffers by exact length, so that a training
// step allocates nothing once the first step has warmed it up, and counts
// the elements handed out and not yet returned: its high-water mark is the
// activation memory of whatever ran on it.
//
// A Pool belongs to one backend and one goroutine; it is not safe for
// concurrent use.
type Pool struct {
	be   kernels.Backend
	free map[int][]kernels.Buffer
	live int64
	peak int64
}

// NewPool returns an empty pool on be.
func NewPool(be kernels.Backend) *Pool {
	return &Pool{be: be, free: map[int][]kernels.Buffer{}}
}

// Get returns a buffer of n elements with unspecified contents.
func (p *Pool) Get(n int) kernels.Buffer {
	p.live += int64(n)
	if p.live > p.peak {
		p.peak = p.live
	}
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[n] = l[:len(l)-1]
		return b
	}
	return p.be.Alloc(n)
}

// GetZero returns a zeroed buffer of n elements.
func (p *Pool) GetZero(n int) kernels.Buffer {
	b := p.Get(n)
	p.be.Fill(b, 0)
	return b
}

// Put returns a buffer obtained from Get. A nil buffer is ignored.
func (p *Pool) Put(b kernels.Buffer) {
	if b == nil {
		return
	}
	n := b.Len()
	p.live -= int64(n)
	p.free[n] = append(p.free[n], b)
}

// Drop returns a buffer obtained from Get to the backend instead of
// keeping it for reuse: for buffers of many lengths that must not stay
// reserved between uses (ZeRO-2's gradient buckets). A nil buffer is
// ignored.
func (p *Pool) Drop(b kernels.Buffer) {
	if b == nil {
		return
	}
	p.live -= int64(b.Len())
	p.be.Free(b)
}

// LiveBytes is the memory handed out and not yet returned.
func (p *Pool) LiveBytes() int64 { return 4 * p.live }

// PeakBytes is the high-water mark of LiveBytes since the last ResetPeak.
func (p *Pool) PeakBytes() int64 { return 4 * p.peak }

// ResetPeak starts a new high-water mark at the current live size.
func (p *Pool) ResetPeak() { p.peak = p.live }

// Backend is the pool's backend.
func (p *Pool) Backend() kernels.Backend { return p.be }
