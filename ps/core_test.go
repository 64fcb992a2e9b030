package ps

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestStalenessBoundByHand drives the versions by hand: workers pull at
// chosen versions, others' updates land, and each gradient is admitted
// exactly when at most MaxStaleness updates landed since its base.
func TestStalenessBoundByHand(t *testing.T) {
	c, err := New(10, 2) // resumed at step 10, bound 2
	if err != nil {
		t.Fatal(err)
	}
	apply := func(base uint64, want bool, wantStale int) {
		t.Helper()
		v, err := c.Admit(base)
		if err != nil {
			t.Fatal(err)
		}
		if v.Admitted != want || v.Staleness != wantStale {
			t.Fatalf("base %d at version %d: got admitted=%v staleness=%d, want %v and %d", base, c.Version(), v.Admitted, v.Staleness, want, wantStale)
		}
		if v.Admitted {
			if v.Version != c.Version()+1 {
				t.Fatalf("admitted as update %d at version %d", v.Version, c.Version())
			}
			c.Applied()
		}
	}
	// Workers A, B, C all pull version 10.
	apply(10, true, 0)  // A: fresh → version 11
	apply(10, true, 1)  // B: one update since → 12
	apply(10, true, 2)  // C: two since → 13
	apply(10, false, 3) // a fourth on version 10: three since, rejected
	apply(11, true, 2)  // on 11: two since → 14
	apply(14, true, 0)  // fresh again → 15
	apply(12, false, 3) // on 12: three since, rejected
	if got := c.Version(); got != 15 {
		t.Fatalf("version %d, want 15 (10 + five admitted)", got)
	}
	if h := c.Histogram(); len(h) != 3 || h[0] != 2 || h[1] != 1 || h[2] != 2 {
		t.Fatalf("histogram %v, want [2 1 2]", h)
	}
	if c.Rejected() != 2 {
		t.Fatalf("rejected %d, want 2", c.Rejected())
	}
	if _, err := c.Admit(16); !errors.Is(err, ErrFuture) {
		t.Fatalf("a base past the version: %v, want ErrFuture", err)
	}
}

// TestZeroStalenessIsSequential: with bound 0 only gradients on the
// current version are taken.
func TestZeroStalenessIsSequential(t *testing.T) {
	c, _ := New(0, 0)
	for i := range uint64(5) {
		if v, _ := c.Admit(i); !v.Admitted {
			t.Fatalf("fresh gradient on %d rejected", i)
		}
		c.Applied()
		if v, _ := c.Admit(i); v.Admitted {
			t.Fatalf("gradient on %d admitted at version %d", i, c.Version())
		}
	}
}

// TestRandomSchedulesKeepTheBound: random interleavings of pulls and
// pushes from several workers; every admitted gradient is within the
// bound, the version counts the admitted ones, and the histogram and the
// rejections account for every push.
func TestRandomSchedulesKeepTheBound(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		bound := rng.IntN(5)
		c, _ := New(0, bound)
		base := make([]uint64, 1+rng.IntN(6)) // each worker's pulled version
		var pushes, admitted int64
		for range 500 {
			w := rng.IntN(len(base))
			if rng.IntN(3) == 0 {
				base[w] = c.Version() // pull
				continue
			}
			pushes++
			v, err := c.Admit(base[w])
			if err != nil {
				t.Fatal(err)
			}
			if got := int(c.Version() - base[w]); v.Staleness != got {
				t.Fatalf("seed %d: staleness %d, want %d", seed, v.Staleness, got)
			}
			if v.Admitted != (v.Staleness <= bound) {
				t.Fatalf("seed %d: staleness %d bound %d admitted=%v", seed, v.Staleness, bound, v.Admitted)
			}
			if v.Admitted {
				admitted++
				c.Applied()
			}
			base[w] = c.Version() // the worker pulls after its push
		}
		var sum int64
		for _, n := range c.Histogram() {
			sum += n
		}
		if sum != admitted || int64(c.Version()) != admitted || sum+c.Rejected() != pushes {
			t.Fatalf("seed %d: histogram %d, version %d, admitted %d, rejected %d, pushes %d", seed, sum, c.Version(), admitted, c.Rejected(), pushes)
		}
	}
}

func TestNegativeBound(t *testing.T) {
	if _, err := New(0, -1); err == nil {
		t.Fatal("a negative bound was accepted")
	}
}
