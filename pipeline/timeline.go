package pipeline

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// Span is one op as it ran on a stage, from Start to End.
type Span struct {
	Op
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// MarshalJSON writes the op's fields beside start and end.
func (s Span) MarshalJSON() ([]byte, error) {
	j := struct {
		opJSON
		Start float64 `json:"start"`
		End   float64 `json:"end"`
	}{opJSON{Kind: s.Kind, Micro: s.Micro}, s.Start, s.End}
	if !s.Kind.Compute() {
		j.Peer = &s.Peer
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes. (Without it the embedded
// Op's UnmarshalJSON would be promoted and drop start and end.)
func (s *Span) UnmarshalJSON(b []byte) error {
	var j struct {
		opJSON
		Start float64 `json:"start"`
		End   float64 `json:"end"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	s.Kind, s.Micro, s.Peer, s.Start, s.End = j.Kind, j.Micro, -1, j.Start, j.End
	if j.Peer != nil && !j.Kind.Compute() {
		s.Peer = *j.Peer
	}
	return nil
}

// MemEvent says how much activation memory micro-batch Micro holds on a
// stage from time T on.
type MemEvent struct {
	T     float64 `json:"t"`
	Micro int     `json:"micro"`
	// Bytes is what Micro holds from T on (0 is allowed: alive, size not
	// measured).
	Bytes int64 `json:"bytes"`
	// Released: Micro holds nothing from T on and no longer counts as alive.
	Released bool `json:"released,omitempty"`
}

// Timeline is what every stage did in one optimizer step: spans of ops and
// activation memory events, in one time unit. Simulate makes one in cost
// units; a Recorder makes one in seconds from real clocks. Stats, Gantt and
// WriteTrace treat both the same way.
type Timeline struct {
	// Unit names the time unit: "unit" for simulated costs, "s" for seconds.
	Unit string `json:"unit"`
	// Spans[s] holds stage s's spans in the order they ran.
	Spans [][]Span `json:"spans"`
	// Mem[s] holds stage s's memory events in the order they happened.
	Mem [][]MemEvent `json:"mem"`
}

// NewTimeline returns an empty timeline for P stages.
func NewTimeline(P int, unit string) *Timeline {
	return &Timeline{Unit: unit, Spans: make([][]Span, P), Mem: make([][]MemEvent, P)}
}

// Stages is the number of stages.
func (tl *Timeline) Stages() int { return len(tl.Spans) }

// Window is the step's extent: from the first span's start on any stage to
// the last span's end on any stage. Empty timelines give (0, 0).
func (tl *Timeline) Window() (start, end float64) {
	first := true
	for _, spans := range tl.Spans {
		for _, sp := range spans {
			if first {
				start, end, first = sp.Start, sp.End, false
				continue
			}
			start, end = min(start, sp.Start), max(end, sp.End)
		}
	}
	return start, end
}

// StageStats is one stage's share of a step.
type StageStats struct {
	Stage int `json:"stage"`
	// Compute is the time covered by Forward, Backward and Recompute spans;
	// Comm the time covered by send and receive spans and not by compute;
	// Idle the rest of the step's window: the stage's bubble.
	Compute float64 `json:"compute"`
	Comm    float64 `json:"comm"`
	Idle    float64 `json:"idle"`
	// BubbleFraction is Idle over the window's length.
	BubbleFraction float64 `json:"bubble_fraction"`
	// PeakInFlight is the most micro-batches alive at once (holding
	// activations), from the memory events; PeakBytes the most activation
	// bytes held at once.
	PeakInFlight int   `json:"peak_in_flight"`
	PeakBytes    int64 `json:"peak_bytes"`
}

// Stats is a step's accounting.
type Stats struct {
	Start    float64 `json:"start"`
	End      float64 `json:"end"`
	Makespan float64 `json:"makespan"`
	// Compute, Comm and Idle are summed over stages.
	Compute float64 `json:"compute"`
	Comm    float64 `json:"comm"`
	Idle    float64 `json:"idle"`
	// BubbleFraction is Idle / (P × Makespan): the share of all stages'
	// time in the step spent waiting. With equal stages and free messages
	// GPipe and 1F1B both give exactly FormulaBubble(P, M).
	BubbleFraction float64      `json:"bubble_fraction"`
	Stages         []StageStats `json:"per_stage"`
}

// PeakInFlight lists every stage's PeakInFlight.
func (s Stats) PeakInFlight() []int {
	out := make([]int, len(s.Stages))
	for i, st := range s.Stages {
		out[i] = st.PeakInFlight
	}
	return out
}

// FormulaBubble is (P − 1)/(M + P − 1): the bubble fraction of GPipe and
// 1F1B with P equal stages, M micro-batches and free messages. Each stage
// works M(f+b) of a step that lasts (M+P−1)(f+b), the pipeline needing P−1
// forward times to fill and P−1 backward times to drain, whatever the ratio
// of the backward time b to the forward time f.
func FormulaBubble(P, M int) float64 {
	return float64(P-1) / float64(M+P-1)
}

// Stats computes the step's accounting. Spans on one stage may overlap
// (a real executor may send while it computes): time is counted once, as
// compute when any compute span covers it.
func (tl *Timeline) Stats() Stats {
	start, end := tl.Window()
	st := Stats{Start: start, End: end, Makespan: end - start, Stages: make([]StageStats, tl.Stages())}
	for s, spans := range tl.Spans {
		var compute, all []interval
		for _, sp := range spans {
			iv := interval{sp.Start, sp.End}
			all = append(all, iv)
			if sp.Kind.Compute() {
				compute = append(compute, iv)
			}
		}
		c, a := unionLength(compute), unionLength(all)
		ss := StageStats{Stage: s, Compute: c, Comm: a - c, Idle: st.Makespan - a}
		if st.Makespan > 0 {
			ss.BubbleFraction = ss.Idle / st.Makespan
		}
		ss.PeakInFlight, ss.PeakBytes = peakMemory(tl.Mem[s])
		st.Stages[s] = ss
		st.Compute += ss.Compute
		st.Comm += ss.Comm
		st.Idle += ss.Idle
	}
	if st.Makespan > 0 && tl.Stages() > 0 {
		st.BubbleFraction = st.Idle / (float64(tl.Stages()) * st.Makespan)
	}
	return st
}

type interval struct{ lo, hi float64 }

// unionLength is the length of the union of the intervals.
func unionLength(ivs []interval) float64 {
	slices.SortFunc(ivs, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	var total float64
	curLo, curHi, open := 0.0, 0.0, false
	for _, iv := range ivs {
		if iv.hi <= iv.lo {
			continue
		}
		if open && iv.lo <= curHi {
			curHi = max(curHi, iv.hi)
			continue
		}
		if open {
			total += curHi - curLo
		}
		curLo, curHi, open = iv.lo, iv.hi, true
	}
	if open {
		total += curHi - curLo
	}
	return total
}

// peakMemory returns the most micro-batches alive and bytes held at once.
func peakMemory(evs []MemEvent) (peak int, peakBytes int64) {
	replayMemory(evs, func(_ float64, alive int, bytes int64) {
		peak, peakBytes = max(peak, alive), max(peakBytes, bytes)
	})
	return peak, peakBytes
}

// replayMemory replays memory events in time order (ties in recorded
// order) and calls fn after each with the micro-batches alive and the
// bytes held.
func replayMemory(evs []MemEvent, fn func(t float64, alive int, bytes int64)) {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b MemEvent) int { return cmp.Compare(a.T, b.T) })
	held := make(map[int]int64)
	var bytes int64
	for _, e := range evs {
		bytes -= held[e.Micro]
		if e.Released {
			delete(held, e.Micro)
		} else {
			held[e.Micro] = e.Bytes
			bytes += e.Bytes
		}
		fn(e.T, len(held), bytes)
	}
}

// Gaps returns stage s's idle intervals within the step's window: the time
// no span covers.
func (tl *Timeline) Gaps(s int) [][2]float64 {
	start, end := tl.Window()
	ivs := make([]interval, 0, len(tl.Spans[s]))
	for _, sp := range tl.Spans[s] {
		if sp.End > sp.Start {
			ivs = append(ivs, interval{sp.Start, sp.End})
		}
	}
	slices.SortFunc(ivs, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	var gaps [][2]float64
	t := start
	for _, iv := range ivs {
		if iv.lo > t {
			gaps = append(gaps, [2]float64{t, iv.lo})
		}
		t = max(t, iv.hi)
	}
	if end > t {
		gaps = append(gaps, [2]float64{t, end})
	}
	return gaps
}

// Validate checks that every span ends no earlier than it starts and every
// stage's compute spans do not overlap (a stage runs one layer pass at a
// time), so that the accounting means what it says.
func (tl *Timeline) Validate() error {
	if len(tl.Mem) != len(tl.Spans) {
		return fmt.Errorf("%w: %d span lists but %d memory lists", ErrBadArgument, len(tl.Spans), len(tl.Mem))
	}
	for s, spans := range tl.Spans {
		var compute []Span
		for i, sp := range spans {
			if !(sp.End >= sp.Start) {
				return fmt.Errorf("%w: stage %d span %d (%v) ends at %v before its start %v", ErrBadArgument, s, i, sp.Op, sp.End, sp.Start)
			}
			if sp.Kind.Compute() {
				compute = append(compute, sp)
			}
		}
		slices.SortStableFunc(compute, func(a, b Span) int { return cmp.Compare(a.Start, b.Start) })
		for i := 1; i < len(compute); i++ {
			if compute[i].Start < compute[i-1].End {
				return fmt.Errorf("%w: stage %d: %v [%v, %v] overlaps %v [%v, %v]", ErrBadArgument, s,
					compute[i].Op, compute[i].Start, compute[i].End, compute[i-1].Op, compute[i-1].Start, compute[i-1].End)
			}
		}
	}
	return nil
}
