//go:build cuda

package cuda

import (
	"errors"
	"testing"
	"unsafe"
)

// fakeDriver is a driver whose memory is a counter: it hands out distinct
// addresses, fails allocations beyond capacity, and records frees. Only the
// allocator's methods are exercised.
type fakeDriver struct {
	capacity, used int64
	next           devPtr
	sizes          map[devPtr]int64
	allocs, frees  int
}

func newFakeDriver(capacity int64) *fakeDriver {
	return &fakeDriver{capacity: capacity, next: 1 << 20, sizes: map[devPtr]int64{}}
}

var errFakeOOM = errors.New("out of memory")

func (f *fakeDriver) info() deviceInfo { return deviceInfo{} }
func (f *fakeDriver) alloc(n int64) (devPtr, error) {
	if f.used+n > f.capacity {
		return 0, errFakeOOM
	}
	f.used += n
	f.allocs++
	p := f.next
	f.next += devPtr(n)
	f.sizes[p] = n
	return p, nil
}
func (f *fakeDriver) free(p devPtr) error {
	n, ok := f.sizes[p]
	if !ok {
		return errors.New("free of an unknown pointer")
	}
	delete(f.sizes, p)
	f.used -= n
	f.frees++
	return nil
}
func (f *fakeDriver) htod(devPtr, unsafe.Pointer, int64) error      { return nil }
func (f *fakeDriver) dtoh(unsafe.Pointer, devPtr, int64) error      { return nil }
func (f *fakeDriver) dtod(devPtr, devPtr, int64) error              { return nil }
func (f *fakeDriver) memset32(devPtr, uint32, int64) error          { return nil }
func (f *fakeDriver) launch(kernel, [3]int, [3]int, []uint64) error { return nil }
func (f *fakeDriver) sync() error                                   { return nil }
func (f *fakeDriver) close() error                                  { return nil }

func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{1, 512}, {512, 512}, {513, 1024}, {4000, 4096}, {4096, 4096},
		{1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {2 << 20, 2 << 20}, {5<<20 + 3, 6 << 20},
	} {
		if got := sizeClass(c.n); got != c.want {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestAllocatorReuse: a freed block comes back for a request of the same
// class without a driver call, and a different class allocates anew.
func TestAllocatorReuse(t *testing.T) {
	f := newFakeDriver(1 << 30)
	a := newAllocator(f, 0)
	b1, err := a.get(1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.put(b1); err != nil {
		t.Fatal(err)
	}
	b2, err := a.get(700) // same 1024-byte class
	if err != nil {
		t.Fatal(err)
	}
	if b2.ptr != b1.ptr || f.allocs != 1 {
		t.Errorf("second get: ptr %#x (first %#x), %d driver allocs; want the cached block and 1 alloc", b2.ptr, b1.ptr, f.allocs)
	}
	if b3, _ := a.get(3000); b3.ptr == b1.ptr || f.allocs != 2 {
		t.Errorf("get of another class reused %#x or made %d allocs", b3.ptr, f.allocs)
	}
	if a.inUse != 1024+4096 || a.cached != 0 {
		t.Errorf("inUse %d, cached %d; want 5120, 0", a.inUse, a.cached)
	}
}

// TestAllocatorOOMReleasesCache: when the driver is full, cached blocks go
// back to it and the allocation is retried; when it still does not fit the
// error says how much was asked and is in use.
func TestAllocatorOOMReleasesCache(t *testing.T) {
	f := newFakeDriver(8 << 20)
	a := newAllocator(f, 0)
	b, err := a.get(6 << 20)
	if err != nil {
		t.Fatal(err)
	}
	a.put(b)
	if _, err := a.get(4 << 20); err != nil {
		t.Fatalf("get after OOM with a cached block: %v", err)
	}
	if f.frees != 1 || a.cached != 0 {
		t.Errorf("frees %d, cached %d: want the cached block released", f.frees, a.cached)
	}
	if _, err := a.get(6 << 20); !errors.Is(err, ErrDriver) {
		t.Errorf("get beyond capacity: err %v, want ErrDriver", err)
	}
}

// TestAllocatorLimit: with a cache limit, blocks beyond it go back to the
// driver at once.
func TestAllocatorLimit(t *testing.T) {
	f := newFakeDriver(1 << 30)
	a := newAllocator(f, 3<<20)
	x, _ := a.get(2 << 20)
	y, _ := a.get(2 << 20)
	a.put(x)
	a.put(y)
	if a.cached != 2<<20 || f.frees != 1 {
		t.Errorf("cached %d, frees %d: want one 2 MiB block kept and one freed", a.cached, f.frees)
	}
}

// TestAllocatorReleaseAll frees live and cached blocks and marks the live
// ones freed, so their buffers panic on use.
func TestAllocatorReleaseAll(t *testing.T) {
	f := newFakeDriver(1 << 30)
	a := newAllocator(f, 0)
	live, _ := a.get(100)
	dead, _ := a.get(5000)
	a.put(dead)
	if err := a.releaseAll(); err != nil {
		t.Fatal(err)
	}
	if len(f.sizes) != 0 || !live.freed || a.inUse != 0 || a.cached != 0 {
		t.Errorf("after releaseAll: %d blocks left at the driver, live.freed=%v, inUse %d, cached %d", len(f.sizes), live.freed, a.inUse, a.cached)
	}
}
