// Package shmem allocates registered memory: float32 buffers that other
// processes on the same host can map, each backed by its own memfd, and
// known to this process's registry so that a transport can tell whether a
// slice it is asked to send lies in one (Find). A same-host peer that has
// mapped the segment then reads the data where it is, instead of receiving
// a copy: the gradient buffers of rank processes on one host, and the
// all-reduce benchmark's buffers, are allocated here (NCCL's registered
// buffers and PyTorch's symmetric memory are the same idea).
//
// The segments have no name in any file system: when the process dies,
// even by kill -9, the kernel drops its mappings and descriptors, and the
// memory goes with the last process that mapped it. Nothing is left under
// /dev/shm.
package shmem

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"unsafe"
)

// ErrUnsupported is returned by Alloc where there is no memfd (not Linux).
var ErrUnsupported = errors.New("shmem: registered memory needs Linux")

// Segment is one registered allocation.
type Segment struct {
	// ID names the segment within this process; ids are never reused.
	ID uint32
	// FD is the memfd behind it, open while the segment is registered: a
	// transport passes it to a peer (SCM_RIGHTS), which maps Bytes of it.
	FD    int
	Bytes int

	base uintptr
	mem  []byte
}

var reg struct {
	mu   sync.RWMutex
	segs []*Segment // by base address
	next uint32
}

// Alloc returns n float32s of registered memory, zeroed (its capacity
// at least 1, so that Free finds even an empty one). Free it when done.
func Alloc(n int) ([]float32, error) {
	if n < 0 {
		return nil, fmt.Errorf("shmem: %d values", n)
	}
	bytes := max(4*n, 4)
	fd, mem, err := create(bytes)
	if err != nil {
		return nil, err
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.next++
	s := &Segment{ID: reg.next, FD: fd, Bytes: bytes, base: uintptr(unsafe.Pointer(&mem[0])), mem: mem}
	i := sort.Search(len(reg.segs), func(i int) bool { return reg.segs[i].base > s.base })
	reg.segs = append(reg.segs, nil)
	copy(reg.segs[i+1:], reg.segs[i:])
	reg.segs[i] = s
	return unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), bytes/4)[:n], nil
}

// Free unregisters and unmaps the allocation that buf starts. Peers that
// mapped it keep their mapping (and so the memory) until they unmap it.
func Free(buf []float32) error {
	if cap(buf) == 0 {
		return nil
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	reg.mu.Lock()
	i := sort.Search(len(reg.segs), func(i int) bool { return reg.segs[i].base >= base })
	if i == len(reg.segs) || reg.segs[i].base != base {
		reg.mu.Unlock()
		return fmt.Errorf("shmem: Free of a buffer Alloc did not return")
	}
	s := reg.segs[i]
	reg.segs = append(reg.segs[:i], reg.segs[i+1:]...)
	reg.mu.Unlock()
	return release(s.FD, s.mem)
}

// Find reports whether p lies wholly inside a registered segment, and
// where: the segment and p's offset in it, in bytes. An empty p is in none.
func Find(p []float32) (Segment, int, bool) {
	if len(p) == 0 {
		return Segment{}, 0, false
	}
	lo := uintptr(unsafe.Pointer(&p[0]))
	hi := lo + uintptr(4*len(p))
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	i := sort.Search(len(reg.segs), func(i int) bool { return reg.segs[i].base > lo }) - 1
	if i < 0 {
		return Segment{}, 0, false
	}
	s := reg.segs[i]
	if hi > s.base+uintptr(s.Bytes) {
		return Segment{}, 0, false
	}
	return *s, int(lo - s.base), true
}

// Registered is how many segments are registered now.
func Registered() int {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return len(reg.segs)
}
