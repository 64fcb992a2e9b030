package wait

import (
	"sync/atomic"
	"testing"
	"time"
)

// Until returns true as soon as the condition holds, checking it again
// after each Poll, and false once the deadline passed without it.
func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(time.Minute, func() bool { return n.Add(1) == 3 }) || n.Load() != 3 {
		t.Fatalf("Until returned after %d checks, want true after 3", n.Load())
	}
	n.Store(0)
	if Until(0, func() bool { n.Add(1); return false }) {
		t.Fatal("Until held a condition that never holds")
	}
	if n.Load() != 1 {
		t.Fatalf("a zero timeout checked %d times, want once", n.Load())
	}
}
