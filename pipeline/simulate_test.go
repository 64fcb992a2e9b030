package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func simulate(t *testing.T, s *Schedule, c Costs) (*Timeline, Stats) {
	t.Helper()
	tl, err := Simulate(s, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.Validate(); err != nil {
		t.Fatal(err)
	}
	return tl, tl.Stats()
}

// computeSpans lists a stage's compute spans as "F0@0-1".
func computeSpans(tl *Timeline, st int) string {
	var parts []string
	for _, sp := range tl.Spans[st] {
		if sp.Kind.Compute() {
			parts = append(parts, fmt.Sprintf("%s@%g-%g", sp.Short(), sp.Start, sp.End))
		}
	}
	return strings.Join(parts, " ")
}

// TestSimulateHandWorked: 1F1B on 2 stages, 2 micro-batches, forward 1,
// backward 2, worked on paper: stage 1 starts F0 at 1, runs B0 2-4, waits
// for nothing (F1's input came at 2) and ends B1 at 7; stage 0's B0 waits
// for stage 1's gradient (4) and B1 for the second (7): makespan 9 =
// (M+P−1)(f+b), each stage busy M(f+b) = 6, bubble 3/9 on each.
func TestSimulateHandWorked(t *testing.T) {
	s := mustBuild(t, Config{Kind: Kind1F1B, Stages: 2, MicroBatches: 2})
	tl, st := simulate(t, s, UniformCosts(2, DefaultStageCost()))
	want := []string{"F0@0-1 F1@1-2 B0@4-6 B1@7-9", "F0@1-2 B0@2-4 F1@4-5 B1@5-7"}
	for p := range want {
		if got := computeSpans(tl, p); got != want[p] {
			t.Errorf("stage %d: %s, want %s", p, got, want[p])
		}
	}
	if st.Makespan != 9 || st.Compute != 12 || st.Idle != 6 || st.Comm != 0 {
		t.Fatalf("%+v", st)
	}
	for _, ss := range st.Stages {
		if ss.Idle != 3 || ss.BubbleFraction != 1.0/3 {
			t.Fatalf("%+v", ss)
		}
	}
}

// TestSimulateCommHandWorked: GPipe, 2 stages, 1 micro-batch, forward 1,
// backward 2, sends busy 0.5, receives 0.25, latency 1. Stage 0: F 0-1,
// send 1-1.5; the activation is ready at 2.5; stage 1: recv 2.5-2.75,
// F 2.75-3.75, B 3.75-5.75, send 5.75-6.25; gradient ready 7.25; stage 0:
// recv 7.25-7.5, B 7.5-9.5.
func TestSimulateCommHandWorked(t *testing.T) {
	s := mustBuild(t, Config{Kind: KindGPipe, Stages: 2, MicroBatches: 1})
	c := UniformCosts(2, StageCost{Forward: 1, Backward: 2, Send: 0.5, Recv: 0.25})
	c.Latency = 1
	tl, st := simulate(t, s, c)
	var got []string
	for p := range 2 {
		for _, sp := range tl.Spans[p] {
			got = append(got, fmt.Sprintf("%d:%s@%g-%g", p, sp.Short(), sp.Start, sp.End))
		}
	}
	want := "0:F0@0-1 0:>a0@1-1.5 0:<g0@7.25-7.5 0:B0@7.5-9.5 1:<a0@2.5-2.75 1:F0@2.75-3.75 1:B0@3.75-5.75 1:>g0@5.75-6.25"
	if strings.Join(got, " ") != want {
		t.Fatalf("%s\nwant %s", strings.Join(got, " "), want)
	}
	// All values are multiples of 1/4: exact in float64.
	if st.Makespan != 9.5 || st.Compute != 6 || st.Comm != 1.5 || st.Idle != 19-7.5 {
		t.Fatalf("%+v", st)
	}
}

// TestBubbleFormula: with P equal stages and free messages, both schedules'
// simulated bubble equals (P−1)/(M+P−1) for P = 1…8, M = 1…32, whether the
// backward costs the same as the forward or twice as much, and with
// recomputation (which only lengthens every stage's backward equally). The
// comparison is exact: Idle and P·makespan are whole numbers of units, so
// both sides are the correctly rounded value of the same fraction.
func TestBubbleFormula(t *testing.T) {
	for _, k := range []Kind{KindGPipe, Kind1F1B} {
		for _, cost := range []StageCost{{Forward: 1, Backward: 1, Recompute: 1}, {Forward: 1, Backward: 2, Recompute: 1}} {
			for _, rc := range []bool{false, true} {
				for P := 1; P <= 8; P++ {
					for M := 1; M <= 32; M++ {
						s := mustBuild(t, Config{Kind: k, Stages: P, MicroBatches: M, Recompute: rc})
						_, st := simulate(t, s, UniformCosts(P, cost))
						f := cost.Forward + cost.Backward
						if rc {
							f += cost.Recompute
						}
						if got, want := st.BubbleFraction, FormulaBubble(P, M); got != want {
							t.Fatalf("%s P=%d M=%d b=%v recompute=%v: bubble %v, formula %v", k, P, M, cost.Backward, rc, got, want)
						}
						if want := float64(M+P-1) * f; st.Makespan != want {
							t.Fatalf("%s P=%d M=%d: makespan %v, want (M+P−1)(f+b) = %v", k, P, M, st.Makespan, want)
						}
					}
				}
			}
		}
	}
}

// TestPeakInFlight: 1F1B keeps min(P−s, M) micro-batches alive on stage s
// (min(P, M) on stage 0); GPipe keeps all M on every stage. Counted from
// the simulated memory events, not from the schedule's shape.
func TestPeakInFlight(t *testing.T) {
	for P := 1; P <= 8; P++ {
		for M := 1; M <= 32; M++ {
			for _, k := range []Kind{KindGPipe, Kind1F1B} {
				s := mustBuild(t, Config{Kind: k, Stages: P, MicroBatches: M})
				_, st := simulate(t, s, UniformCosts(P, DefaultStageCost()))
				for p, got := range st.PeakInFlight() {
					want := M
					if k == Kind1F1B {
						want = min(P-p, M)
					}
					if got != want {
						t.Fatalf("%s P=%d M=%d stage %d: peak %d, want %d", k, P, M, p, got, want)
					}
				}
			}
		}
	}
}

// TestPeakBytesRecompute: a stage keeps 100 bytes per micro-batch, or its
// 10-byte input under recomputation. GPipe with 4 micro-batches on one
// stage: 400 bytes without; with, the peak is during the first recompute
// and backward: 3 inputs + one full set = 130.
func TestPeakBytesRecompute(t *testing.T) {
	cost := StageCost{Forward: 1, Backward: 2, Recompute: 1, ActBytes: 100, InputBytes: 10}
	for _, c := range []struct {
		kind      Kind
		recompute bool
		want      int64
	}{{KindGPipe, false, 400}, {KindGPipe, true, 130}, {Kind1F1B, false, 100}, {Kind1F1B, true, 100}} {
		s := mustBuild(t, Config{Kind: c.kind, Stages: 1, MicroBatches: 4, Recompute: c.recompute})
		_, st := simulate(t, s, UniformCosts(1, cost))
		if got := st.Stages[0].PeakBytes; got != c.want {
			t.Errorf("%s recompute=%v: peak %d bytes, want %d", c.kind, c.recompute, got, c.want)
		}
		if st.Stages[0].PeakInFlight != map[Kind]int{KindGPipe: 4, Kind1F1B: 1}[c.kind] {
			t.Errorf("%s recompute=%v: peak in flight %d", c.kind, c.recompute, st.Stages[0].PeakInFlight)
		}
	}
}

// TestSlowStage: with one stage twice as slow, the pipeline runs at its
// pace: GPipe on 2 stages, M = 4, stage 1 costs (2, 4). Stage 1 forwards
// 1-9, backwards 9-25; stage 0's last backward starts when the last
// gradient arrives (25) and ends at 27.
func TestSlowStage(t *testing.T) {
	s := mustBuild(t, Config{Kind: KindGPipe, Stages: 2, MicroBatches: 4})
	c := Costs{Stages: []StageCost{{Forward: 1, Backward: 2}, {Forward: 2, Backward: 4}}}
	_, st := simulate(t, s, c)
	if st.Makespan != 27 || st.Stages[0].Idle != 15 || st.Stages[1].Idle != 3 {
		t.Fatalf("%+v", st)
	}
	if st.BubbleFraction <= FormulaBubble(2, 4) {
		t.Fatalf("unequal stages should idle more than the formula: %v", st.BubbleFraction)
	}
}

func TestCostsValidate(t *testing.T) {
	s := mustBuild(t, Config{Kind: KindGPipe, Stages: 2, MicroBatches: 1})
	bad := []struct {
		c    Costs
		text string
	}{
		{UniformCosts(3, DefaultStageCost()), "costs for 3 stages, schedule has 2"},
		{Costs{Stages: []StageCost{{Forward: -1}, {}}}, "stage 0 forward time -1"},
		{Costs{Stages: []StageCost{{}, {ActBytes: -1}}}, "activation bytes -1"},
		{Costs{Stages: []StageCost{{}, {}}, Latency: -2}, "latency -2"},
	}
	for _, b := range bad {
		_, err := Simulate(s, b.c)
		if !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), b.text) {
			t.Errorf("%+v: %v, want mention of %q", b.c, err, b.text)
		}
	}
	if _, err := Simulate(s, Costs{Stages: []StageCost{{}, {Backward: math.NaN()}}}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}
