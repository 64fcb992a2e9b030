package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Pool recycles activation buffers by exact length and type, so that a
// training step allocates nothing once the first step has warmed it up,
// and counts the bytes handed out and not yet returned: its high-water
// mark is the activation memory of whatever ran on it (a bf16 or fp16
// buffer counts two bytes a value).
//
// A Pool belongs to one backend and one goroutine; it is not safe for
// concurrent use.
type Pool struct {
	be   kernels.Backend
	lp   kernels.LowPrecision
	free map[poolKey][]kernels.Buffer
	live int64
	peak int64
}

type poolKey struct {
	n  int
	dt kernels.DType
}

// NewPool returns an empty pool on be.
func NewPool(be kernels.Backend) *Pool {
	lp, _ := kernels.LowPrecisionOf(be)
	return &Pool{be: be, lp: lp, free: map[poolKey][]kernels.Buffer{}}
}

// Get returns an fp32 buffer of n elements with unspecified contents.
func (p *Pool) Get(n int) kernels.Buffer { return p.GetAs(n, kernels.F32) }

// GetAs returns a buffer of n elements of type dt with unspecified
// contents; a 16-bit type needs a backend with kernels.LowPrecision.
func (p *Pool) GetAs(n int, dt kernels.DType) kernels.Buffer {
	p.live += int64(n * dt.Size())
	if p.live > p.peak {
		p.peak = p.live
	}
	k := poolKey{n, dt}
	if l := p.free[k]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[k] = l[:len(l)-1]
		return b
	}
	if dt == kernels.F32 {
		return p.be.Alloc(n)
	}
	if p.lp == nil {
		panic(fmt.Sprintf("nn: the %s backend has no %v buffers", p.be.Caps().Device, dt))
	}
	return p.lp.AllocAs(n, dt)
}

// GetZero returns a zeroed fp32 buffer of n elements.
func (p *Pool) GetZero(n int) kernels.Buffer {
	b := p.Get(n)
	p.be.Fill(b, 0)
	return b
}

// Put returns a buffer obtained from Get or GetAs. A nil buffer is
// ignored.
func (p *Pool) Put(b kernels.Buffer) {
	if b == nil {
		return
	}
	k := poolKey{b.Len(), kernels.DTypeOf(b)}
	p.live -= int64(k.n * k.dt.Size())
	p.free[k] = append(p.free[k], b)
}

// Drop returns a buffer obtained from Get to the backend instead of
// keeping it for reuse: for buffers of many lengths that must not stay
// reserved between uses (ZeRO-2's gradient buckets). A nil buffer is
// ignored.
func (p *Pool) Drop(b kernels.Buffer) {
	if b == nil {
		return
	}
	p.live -= int64(b.Len() * kernels.DTypeOf(b).Size())
	p.be.Free(b)
}

// LiveBytes is the memory handed out and not yet returned.
func (p *Pool) LiveBytes() int64 { return p.live }

// PeakBytes is the high-water mark of LiveBytes since the last ResetPeak.
func (p *Pool) PeakBytes() int64 { return p.peak }

// ResetPeak starts a new high-water mark at the current live size.
func (p *Pool) ResetPeak() { p.peak = p.live }

// Backend is the pool's backend.
func (p *Pool) Backend() kernels.Backend { return p.be }
