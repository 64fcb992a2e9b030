//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
)

// block is one device allocation handed out by the allocator. Buffers and
// their views point at it, so a use after Free is caught on the host.
type block struct {
	ptr   devPtr
	class int64 // bytes actually allocated, the size class
	freed bool
}

// allocator is a caching allocator in the manner of PyTorch's: cudaMalloc
// and cudaFree synchronise the device and cost tens of µs to ms, and a
// training step allocates and frees the same sizes every step, so freed
// blocks are kept in per-size-class free lists and handed out again.
// Size classes: powers of two from 512 B to 1 MiB, then multiples of 2 MiB,
// so the waste is below 2× for small blocks and below 2 MiB for large ones.
//
// It is used from the loop goroutine only. Reuse is safe without events
// because every kernel and copy runs on the backend's single stream.
type allocator struct {
	drv    driver
	free   map[int64][]devPtr
	live   map[*block]struct{}
	limit  int64 // most bytes kept in free lists; 0: no limit
	cached int64 // bytes in free lists
	inUse  int64 // bytes handed out
}

func newAllocator(drv driver, limit int64) *allocator {
	return &allocator{drv: drv, free: map[int64][]devPtr{}, live: map[*block]struct{}{}, limit: limit}
}

const (
	minClass   = 512
	smallLimit = 1 << 20
	largeGrain = 2 << 20
)

// sizeClass is the number of bytes allocated for a request of n bytes.
func sizeClass(n int64) int64 {
	switch {
	case n <= minClass:
		return minClass
	case n <= smallLimit:
		return 1 << bits.Len64(uint64(n-1))
	default:
		return (n + largeGrain - 1) / largeGrain * largeGrain
	}
}

// get returns a block of at least n bytes (n > 0). When the driver is out of
// memory it returns every cached block to the driver and tries once more.
func (a *allocator) get(n int64) (*block, error) {
	c := sizeClass(n)
	if l := a.free[c]; len(l) > 0 {
		p := l[len(l)-1]
		a.free[c] = l[:len(l)-1]
		a.cached -= c
		return a.hand(p, c), nil
	}
	p, err := a.drv.alloc(c)
	if err != nil {
		a.releaseCached()
		if p, err = a.drv.alloc(c); err != nil {
			return nil, fmt.Errorf("%w: allocating %d bytes (%d in use): %v", ErrDriver, c, a.inUse, err)
		}
	}
	return a.hand(p, c), nil
}

func (a *allocator) hand(p devPtr, c int64) *block {
	b := &block{ptr: p, class: c}
	a.live[b] = struct{}{}
	a.inUse += c
	return b
}

// put returns b to its free list, or to the driver when the cache is full.
func (a *allocator) put(b *block) error {
	delete(a.live, b)
	a.inUse -= b.class
	if a.limit > 0 && a.cached+b.class > a.limit {
		return a.drv.free(b.ptr)
	}
	a.free[b.class] = append(a.free[b.class], b.ptr)
	a.cached += b.class
	return nil
}

// releaseCached returns every free-listed block to the driver.
func (a *allocator) releaseCached() error {
	var errs []error
	classes := make([]int64, 0, len(a.free))
	for c := range a.free {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool { return classes[i] < classes[j] })
	for _, c := range classes {
		for _, p := range a.free[c] {
			if err := a.drv.free(p); err != nil {
				errs = append(errs, err)
			}
		}
		delete(a.free, c)
	}
	a.cached = 0
	return errors.Join(errs...)
}

// releaseAll frees the cached and the live blocks (at Close): buffers still
// held by the caller are dead afterwards.
func (a *allocator) releaseAll() error {
	errs := []error{a.releaseCached()}
	for b := range a.live {
		b.freed = true
		errs = append(errs, a.drv.free(b.ptr))
	}
	clear(a.live)
	a.inUse = 0
	return errors.Join(errs...)
}
