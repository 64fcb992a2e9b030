package pipeline

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestStatsOverlap: a real executor may send while it computes. Stage 0:
// F0 [0, 4), a send [3, 6) overlapping it, B0 [8, 10); stage 1: F0 [2, 5).
// Window [0, 10). Stage 0: compute 6, comm 2 (only [4, 6) is not compute),
// idle 2; stage 1: compute 3, idle 7. Bubble 9/20.
func TestStatsOverlap(t *testing.T) {
	tl := NewTimeline(2, "s")
	tl.Spans[0] = []Span{{computeOp(Forward, 0), 0, 4}, {Op{SendAct, 0, 1}, 3, 6}, {computeOp(Backward, 0), 8, 10}}
	tl.Spans[1] = []Span{{computeOp(Forward, 0), 2, 5}}
	st := tl.Stats()
	if st.Start != 0 || st.End != 10 || st.Makespan != 10 {
		t.Fatalf("%+v", st)
	}
	want := []StageStats{{Stage: 0, Compute: 6, Comm: 2, Idle: 2, BubbleFraction: 0.2}, {Stage: 1, Compute: 3, Idle: 7, BubbleFraction: 0.7}}
	for i := range want {
		if st.Stages[i] != want[i] {
			t.Fatalf("stage %d: %+v, want %+v", i, st.Stages[i], want[i])
		}
	}
	if st.BubbleFraction != 9.0/20 || st.Compute != 9 || st.Comm != 2 || st.Idle != 9 {
		t.Fatalf("%+v", st)
	}
	if g := tl.Gaps(0); len(g) != 1 || g[0] != [2]float64{6, 8} {
		t.Fatalf("gaps %v", g)
	}
	if g := tl.Gaps(1); len(g) != 2 || g[0] != [2]float64{0, 2} || g[1] != [2]float64{5, 10} {
		t.Fatalf("gaps %v", g)
	}
}

func TestStatsEmpty(t *testing.T) {
	st := NewTimeline(3, "s").Stats()
	if st.Makespan != 0 || st.BubbleFraction != 0 || len(st.Stages) != 3 {
		t.Fatalf("%+v", st)
	}
}

// TestUnionLength against a naive count on a grid: random intervals with
// endpoints on whole numbers in [0, 50), their union measured by counting
// covered unit cells.
func TestUnionLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := range 500 {
		var ivs []interval
		var covered [50]bool
		for range rng.IntN(8) {
			a, b := rng.IntN(50), rng.IntN(50)
			ivs = append(ivs, interval{float64(a), float64(b)}) // b < a: empty
			for c := a; c < b; c++ {
				covered[c] = true
			}
		}
		want := 0
		for _, c := range covered {
			if c {
				want++
			}
		}
		if got := unionLength(ivs); got != float64(want) {
			t.Fatalf("trial %d: %v → %v, want %d", trial, ivs, got, want)
		}
	}
}

// TestPeakMemory: events out of time order are replayed in time order;
// equal times keep their recorded order (a release then a hold at the same
// instant never counts both micro-batches).
func TestPeakMemory(t *testing.T) {
	evs := []MemEvent{
		{T: 0, Micro: 0, Bytes: 10},
		{T: 2, Micro: 0, Released: true},
		{T: 2, Micro: 1, Bytes: 30},
		{T: 1, Micro: 2, Bytes: 5},
		{T: 3, Micro: 1, Bytes: 1}, // shrinks (checkpointed forward ends)
		{T: 4, Micro: 3, Bytes: 7},
	}
	n, b := peakMemory(evs)
	// t=1: {0:10, 2:5} → 2, 15; t=2: {2:5, 1:30} → 2, 35; t=4: {2:5, 1:1, 3:7} → 3, 13.
	if n != 3 || b != 35 {
		t.Fatalf("peak %d micro-batches, %d bytes; want 3, 35", n, b)
	}
}

func TestTimelineValidate(t *testing.T) {
	tl := NewTimeline(1, "s")
	tl.Spans[0] = []Span{{computeOp(Forward, 0), 0, 2}, {Op{SendAct, 0, 1}, 1, 3}, {computeOp(Forward, 1), 2, 3}}
	if err := tl.Validate(); err != nil {
		t.Fatal(err)
	}
	tl.Spans[0] = append(tl.Spans[0], Span{computeOp(Backward, 0), 2.5, 4})
	if err := tl.Validate(); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "backward 0 [2.5, 4] overlaps forward 1 [2, 3]") {
		t.Fatal(err)
	}
	tl.Spans[0] = []Span{{computeOp(Forward, 0), 2, 1}}
	if err := tl.Validate(); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "before its start") {
		t.Fatal(err)
	}
	tl.Mem = nil
	if err := tl.Validate(); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}

func TestGanttErrors(t *testing.T) {
	var b strings.Builder
	tl := NewTimeline(1, "s")
	tl.Spans[0] = []Span{{computeOp(Forward, 0), 0, 1}}
	for _, unit := range []float64{0, -1} {
		if err := tl.Gantt(&b, unit); !errors.Is(err, ErrBadArgument) {
			t.Fatalf("unit %v: %v", unit, err)
		}
	}
	if err := tl.Gantt(&b, 1e-9); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "columns wide") {
		t.Fatal(err)
	}
	if err := NewTimeline(0, "s").Gantt(&b, 1); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}

// TestGanttTicks: when the time labels are wider than the cells, only every
// step-th column is numbered (1, 2, 5, 10, …).
func TestGanttTicks(t *testing.T) {
	tl := NewTimeline(1, "unit")
	tl.Spans[0] = []Span{{computeOp(Forward, 0), 0, 1}, {computeOp(Backward, 0), 100, 123}}
	var b strings.Builder
	if err := tl.Gantt(&b, 1); err != nil {
		t.Fatal(err)
	}
	header := strings.SplitN(b.String(), "\n", 2)[0]
	// Cells are 2 wide plus a space; "123" needs 2 columns: step 2.
	if !strings.HasPrefix(header, "unit    | 0     2     4") {
		t.Fatalf("header %q", header)
	}
}

func TestSpanJSON(t *testing.T) {
	b, err := json.Marshal([]Span{{computeOp(Forward, 1), 0, 1.5}, {Op{RecvGrad, 1, 2}, 2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"forward","micro":1,"start":0,"end":1.5},{"op":"recv_grad","micro":1,"peer":2,"start":2,"end":2}]`
	if string(b) != want {
		t.Fatalf("%s", b)
	}
	var back []Span
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0] != (Span{computeOp(Forward, 1), 0, 1.5}) || back[1] != (Span{Op{RecvGrad, 1, 2}, 2, 2}) {
		t.Fatalf("%+v", back)
	}
}

// FuzzSpanJSON: any JSON either fails to decode into a Span or decodes into
// one that encodes and decodes back to itself.
func FuzzSpanJSON(f *testing.F) {
	f.Add([]byte(`{"op":"forward","micro":1,"start":0,"end":1.5}`))
	f.Add([]byte(`{"op":"recv_grad","micro":1,"peer":2,"start":2,"end":2}`))
	f.Add([]byte(`{"op":"fly","start":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Span
		if json.Unmarshal(b, &s) != nil {
			return
		}
		if !s.Kind.Compute() && s.Peer == -1 {
			return // a message op without a peer: nothing to round-trip
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Span
		if err := json.Unmarshal(out, &back); err != nil || back != s {
			t.Fatalf("%s → %+v → %s → %+v (%v)", b, s, out, back, err)
		}
	})
}
