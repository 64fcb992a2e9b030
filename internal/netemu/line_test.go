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

// A lossy line drops about its share of the packets, the same ones for
// the same seed, and keeps the others' order.
func TestLineLosesItsShare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := func(seed uint64) []byte {
		l := &Line{Loss: 0.2, Seed: seed}
		lost := 0
		for i := range 10000 {
			if err := l.Push([]byte{byte(i)}, t0); errors.Is(err, ErrLost) {
				lost++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if lost < 1800 || lost > 2200 {
			t.Errorf("lost %d of 10000 packets at 20 %%", lost)
		}
		var kept []byte
		for p, _ := l.Pop(t0); p != nil; p, _ = l.Pop(t0) {
			kept = append(kept, p[0])
		}
		if len(kept) != 10000-lost {
			t.Errorf("%d packets came out, %d went in", len(kept), 10000-lost)
		}
		return kept
	}
	a, b := run(7), run(7)
	if string(a) != string(b) {
		t.Error("the same seed lost other packets")
	}
	if string(a) == string(run(8)) {
		t.Error("another seed lost the same packets")
	}
}
