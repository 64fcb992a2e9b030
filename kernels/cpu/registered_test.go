//go:build linux

package cpu

import (
	"testing"

	"github.com/troupe-ml/troupe/internal/shmem"
)

// TestAllocRegistered: the backend's registered buffers are registered
// memory, zeroed; freeing a view of one leaves it, freeing it releases it.
func TestAllocRegistered(t *testing.T) {
	be := New(1)
	before := shmem.Registered()
	b, err := be.AllocRegistered(100)
	if err != nil {
		t.Fatal(err)
	}
	f := F(b)
	if len(f) != 100 || shmem.Registered() != before+1 {
		t.Fatalf("%d values, %d segments more", len(f), shmem.Registered()-before)
	}
	if _, _, ok := shmem.Find(f); !ok {
		t.Fatal("not in registered memory")
	}
	be.Fill(b, 2)
	be.Free(be.View(b, 0, 50))
	be.Free(be.View(b, 10, 90))
	if shmem.Registered() != before+1 || f[99] != 2 {
		t.Fatal("freeing a view released the buffer")
	}
	be.Free(b)
	if shmem.Registered() != before {
		t.Fatal("Free left the buffer registered")
	}
	be.Free(be.Alloc(10)) // Go memory: nothing to release
}
