package netemu

import (
	"errors"
	"testing"
	"time"
)

// Every packet leaves exactly Delay after it arrived, in arrival order;
// a full line drops.
func TestLineHoldsEachPacketForItsDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := &Line{Delay: 20 * time.Millisecond, Limit: 3}
	for i, at := range []time.Duration{0, 5 * time.Millisecond, 5 * time.Millisecond} {
		if err := l.Push([]byte{byte(i)}, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Push([]byte{9}, t0); !errors.Is(err, ErrFull) {
		t.Fatalf("a fourth packet on a line of 3: %v", err)
	}
	if p, wait := l.Pop(t0.Add(19 * time.Millisecond)); p != nil || wait != time.Millisecond {
		t.Fatalf("before the delay: packet %v, wait %v", p, wait)
	}
	if p, _ := l.Pop(t0.Add(20 * time.Millisecond)); len(p) != 1 || p[0] != 0 {
		t.Fatalf("at the delay: packet %v, want [0]", p)
	}
	if p, wait := l.Pop(t0.Add(24 * time.Millisecond)); p != nil || wait != time.Millisecond {
		t.Fatalf("packet %v, wait %v; want none for 1ms", p, wait)
	}
	for want := byte(1); want <= 2; want++ {
		if p, _ := l.Pop(t0.Add(25 * time.Millisecond)); len(p) != 1 || p[0] != want {
			t.Fatalf("packet %v, want [%d]", p, want)
		}
	}
	if p, wait := l.Pop(t0.Add(time.Hour)); p != nil || wait != 0 || l.Len() != 0 {
		t.Fatalf("an empty line gave %v, wait %v, len %d", p, wait, l.Len())
	}
}
