package pipeline

import (
	"fmt"

	"github.com/troupe-ml/troupe/trace"
)

// TraceOptions place a timeline in a trace file.
type TraceOptions struct {
	// Pid is the trace process the stages' tracks belong to (one per
	// data-parallel replica, say); Process names it.
	Pid     int
	Process string
	// Scale is the number of microseconds in one unit of the timeline:
	// 1e6 for a Recorder's seconds, any convenient value for cost units.
	Scale float64
	// Offset is added to every timestamp, in microseconds.
	Offset float64
}

// WriteTrace adds the timeline to tw: one track per stage ("stage 0", …) in
// process o.Pid, a span per op (category forward, backward, recompute,
// send or recv), an "idle" span per gap in the step's window, and an
// "activations" counter per stage (micro-batches alive and bytes held).
func (tl *Timeline) WriteTrace(tw *trace.Writer, o TraceOptions) error {
	if !(o.Scale > 0) {
		return fmt.Errorf("%w: trace scale %v: want a positive number of microseconds per unit", ErrBadArgument, o.Scale)
	}
	ts := func(t float64) float64 { return o.Offset + t*o.Scale }
	tw.NameProcess(o.Pid, o.Process, o.Pid)
	for s, spans := range tl.Spans {
		tw.NameThread(o.Pid, s, fmt.Sprintf("stage %d", s), s)
		for _, sp := range spans {
			args := map[string]any{"micro": sp.Micro}
			if !sp.Kind.Compute() {
				args["peer"] = sp.Peer
			}
			tw.Span(o.Pid, s, sp.Short(), traceCategory(sp.Kind), ts(sp.Start), (sp.End-sp.Start)*o.Scale, args)
		}
		for _, g := range tl.Gaps(s) {
			tw.Span(o.Pid, s, "idle", "idle", ts(g[0]), (g[1]-g[0])*o.Scale, nil)
		}
		name := fmt.Sprintf("stage %d activations", s)
		replayMemory(tl.Mem[s], func(t float64, alive int, bytes int64) {
			tw.Counter(o.Pid, name, ts(t), map[string]float64{"micro-batches": float64(alive), "bytes": float64(bytes)})
		})
	}
	return nil
}

func traceCategory(k OpKind) string {
	switch k {
	case SendAct, SendGrad:
		return "send"
	case RecvAct, RecvGrad:
		return "recv"
	}
	return k.String()
}
