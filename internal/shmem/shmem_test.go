//go:build linux

package shmem

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestAllocFindFree(t *testing.T) {
	before := Registered()
	a, err := Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Alloc(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 1000 || cap(a) != 1000 || Registered() != before+2 {
		t.Fatalf("len %d cap %d, %d segments registered", len(a), cap(a), Registered()-before)
	}
	for i, v := range a {
		if v != 0 {
			t.Fatalf("a[%d] = %v, want zeroed memory", i, v)
		}
	}
	sa, off, ok := Find(a[100:200])
	if !ok || off != 400 || sa.Bytes != 4000 {
		t.Fatalf("a[100:200]: %+v at %d, %v", sa, off, ok)
	}
	sb, off, ok := Find(b)
	if !ok || off != 0 || sb.ID == sa.ID {
		t.Fatalf("b: %+v at %d, %v (a is segment %d)", sb, off, ok, sa.ID)
	}
	// beyond the segment's end, empty, and Go memory: in none
	if _, _, ok := Find(unsafe.Slice(&a[999], 2)); ok {
		t.Fatal("a slice running past the segment's end was found")
	}
	if _, _, ok := Find(a[5:5]); ok {
		t.Fatal("an empty slice was found")
	}
	if _, _, ok := Find(make([]float32, 10)); ok {
		t.Fatal("Go memory was found")
	}

	// another mapping of the descriptor (what a peer process makes) sees
	// this process's writes
	peer, err := unix.Mmap(sa.FD, 0, sa.Bytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(peer)
	a[7] = 3.5
	if got := unsafe.Slice((*float32)(unsafe.Pointer(&peer[0])), 1000)[7]; got != 3.5 {
		t.Fatalf("the second mapping reads %v, want 3.5", got)
	}

	if err := Free(a); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := Find(b); !ok || Registered() != before+1 {
		t.Fatal("freeing a lost b")
	}
	if err := Free(b[1:]); err == nil {
		t.Fatal("Free of a slice Alloc did not return succeeded")
	}
	if err := Free(make([]float32, 3)); err == nil {
		t.Fatal("Free of Go memory succeeded")
	}
	if err := Free(b); err != nil {
		t.Fatal(err)
	}
	if Registered() != before {
		t.Fatalf("%d segments left", Registered()-before)
	}
	// the peer's mapping outlives the owner's Free
	if got := unsafe.Slice((*float32)(unsafe.Pointer(&peer[0])), 1000)[7]; got != 3.5 {
		t.Fatalf("after Free the peer reads %v", got)
	}
}

func TestAllocEmpty(t *testing.T) {
	before := Registered()
	a, err := Alloc(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 0 {
		t.Fatalf("len %d", len(a))
	}
	if err := Free(a); err != nil {
		t.Fatal(err)
	}
	if Registered() != before {
		t.Fatal("an empty allocation stayed registered after Free")
	}
	if _, err := Alloc(-1); err == nil {
		t.Fatal("Alloc(-1) succeeded")
	}
}
