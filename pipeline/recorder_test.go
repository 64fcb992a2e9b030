package pipeline

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// TestRecorderMatchesSimulator replays a simulated step into a Recorder, as
// an executor would with real clocks (one cost unit = 1 ms), and checks
// that the measured accounting equals the simulated one. Tolerance 1e-12
// relative: the Recorder stores float64 seconds from integer nanoseconds,
// so 0.001·k differs from the exact value in the last bits.
func TestRecorderMatchesSimulator(t *testing.T) {
	for _, k := range []Kind{KindGPipe, Kind1F1B} {
		s := mustBuild(t, Config{Kind: k, Stages: 4, MicroBatches: 8})
		sim, err := Simulate(s, UniformCosts(4, StageCost{Forward: 1, Backward: 2, ActBytes: 64}))
		if err != nil {
			t.Fatal(err)
		}
		origin := time.Unix(1000, 0)
		at := func(u float64) time.Time { return origin.Add(time.Duration(u * float64(time.Millisecond))) }
		rec, err := NewRecorder(4, origin)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for st := range 4 {
			wg.Add(1)
			go func() { // one goroutine per stage, as stage actors
				defer wg.Done()
				for _, sp := range sim.Spans[st] {
					if err := rec.Op(st, sp.Op, at(sp.Start), at(sp.End)); err != nil {
						t.Error(err)
					}
				}
				for _, e := range sim.Mem[st] {
					if e.Released {
						rec.Release(st, e.Micro, at(e.T))
					} else {
						rec.Hold(st, e.Micro, e.Bytes, at(e.T))
					}
				}
			}()
		}
		wg.Wait()
		got, want := rec.Take().Stats(), sim.Stats()
		close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }
		if !close(got.Makespan, want.Makespan/1000) || !close(got.BubbleFraction, want.BubbleFraction) {
			t.Fatalf("%s: measured makespan %v bubble %v, simulated %v %v", k, got.Makespan, got.BubbleFraction, want.Makespan/1000, want.BubbleFraction)
		}
		for i := range got.Stages {
			g, w := got.Stages[i], want.Stages[i]
			if g.PeakInFlight != w.PeakInFlight || g.PeakBytes != w.PeakBytes || !close(g.Idle, w.Idle/1000) {
				t.Fatalf("%s stage %d: %+v, simulated %+v", k, i, g, w)
			}
		}
		if next := rec.Take(); next.Stats().Makespan != 0 || len(next.Spans) != 4 {
			t.Fatal("Take did not start a fresh timeline")
		}
	}
}

func TestRecorderErrors(t *testing.T) {
	if _, err := NewRecorder(0, time.Time{}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	rec, _ := NewRecorder(2, time.Unix(0, 0))
	now := time.Unix(1, 0)
	if err := rec.Op(2, computeOp(Forward, 0), now, now); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if err := rec.Op(0, computeOp(Forward, 0), now, now.Add(-time.Second)); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if err := rec.Hold(-1, 0, 1, now); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if err := rec.Hold(0, 0, -1, now); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if err := rec.Release(5, 0, now); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if rec.Origin() != time.Unix(0, 0) {
		t.Fatal("origin")
	}
	if err := rec.Op(1, computeOp(Forward, 0), now, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if tl := rec.Take(); tl.Unit != "s" || tl.Spans[1][0].Start != 1 || tl.Spans[1][0].End != 2 {
		t.Fatalf("%+v", tl)
	}
}
