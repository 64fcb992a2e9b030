package elastic

import (
	"testing"
	"time"
)

// TestGoneTracker: a lone node gives up after Gone of refusals from every
// address it knows, also when some dials go unanswered (a lossy link: here
// one dial in three), never when all go unanswered (a partition) or one
// address never answers, and an accepted dial or a live peer restarts the
// count.
func TestGoneTracker(t *testing.T) {
	const gone = 5 * time.Second
	t0 := time.Unix(1000, 0)
	tick := 250 * time.Millisecond
	addrs := []string{"a", "b"}
	run := func(ticks int, alone bool, result func(i int, a string) dialResult) (int, bool) {
		var g goneTracker
		for i := 0; i < ticks; i++ {
			dials := map[string]dialResult{}
			for _, a := range addrs {
				dials[a] = result(i, a)
			}
			if g.observe(t0.Add(time.Duration(i)*tick), alone, dials, gone) {
				return i, true
			}
		}
		return ticks, false
	}
	refused := func(int, string) dialResult { return dialRefused }
	if i, ok := run(100, true, refused); !ok || i != int(gone/tick) {
		t.Errorf("every dial refused: gone at tick %d (%v), want %d", i, ok, gone/tick)
	}
	lossy := func(i int, a string) dialResult {
		if (i+len(a))%3 == 0 {
			return dialSilent
		}
		return dialRefused
	}
	if i, ok := run(100, true, lossy); !ok || i > int(gone/tick)+3 {
		t.Errorf("a third of the dials unanswered: gone at tick %d (%v), want about %d", i, ok, gone/tick)
	}
	if _, ok := run(200, true, func(int, string) dialResult { return dialSilent }); ok {
		t.Error("a partition (no answer at all) gave up")
	}
	if _, ok := run(200, false, refused); ok {
		t.Error("a node with peers gave up")
	}
	// an accepted dial every 10 ticks (19 ticks < Gone) restarts the count
	if _, ok := run(200, true, func(i int, a string) dialResult {
		if i%10 == 0 && a == "b" {
			return dialAccepted
		}
		return dialRefused
	}); ok {
		t.Error("gave up although an address accepted within every Gone")
	}
	// one address refuses, the other never answers (cut off, alive
	// perhaps): not every address is gone
	if _, ok := run(200, true, func(i int, a string) dialResult {
		if a == "b" {
			return dialSilent
		}
		return dialRefused
	}); ok {
		t.Error("gave up while one address never answered")
	}
}

// A node whose newest committed world is itself alone trains by itself:
// seeing no peer then is no sign that it was left behind. Any other world
// (none yet, others in it, another node alone) keeps the heuristic.
func TestSoleMember(t *testing.T) {
	n1, n2 := Member{ID: "n1"}, Member{ID: "n2"}
	for _, tc := range []struct {
		w    *World
		want bool
	}{
		{nil, false},
		{&World{}, false},
		{&World{Gen: 3, Members: []Member{n1}}, true},
		{&World{Gen: 3, Members: []Member{n1, n2}}, false},
		{&World{Gen: 3, Members: []Member{n2}}, false},
	} {
		if got := soleMember(tc.w, "n1"); got != tc.want {
			t.Errorf("soleMember(%+v, n1) = %v, want %v", tc.w, got, tc.want)
		}
	}
}
