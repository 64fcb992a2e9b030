package collective

import (
	"errors"
	"fmt"
	"time"
)

// TraceStep is every rank's buffer after one step of a lockstep run.
type TraceStep struct {
	// Phase is "start", "reduce-scatter", "all-gather", "broadcast",
	// "gather", "scatter" or "recursive-doubling".
	Phase string
	// Step counts the steps of Phase from 1 (0 for "start").
	Step int
	// Buffers holds a copy of each rank's buffer.
	Buffers [][]float32
	// Data lists the data messages delivered in the step, in order.
	Data []TraceMsg
}

// TraceMsg is one data message of a trace: group ranks and its sequence
// number (for recursive doubling: 0 the fold, 1…log₂P' the rounds, then
// the unfold; see RDStage).
type TraceMsg struct {
	From, To int
	Seq      int
}

// RDShape is the plan of a recursive-doubling all-reduce among size ranks:
// its rounds (log₂P', P' the largest power of two ≤ size) and how many
// ranks fold into another first (size − P').
func RDShape(size int) (rounds, folded int) {
	p := newRDPlan(0, size)
	return p.rounds, p.folds
}

// RDStage names data seq of a recursive-doubling all-reduce among size
// ranks: "fold", "round k" or "unfold".
func RDStage(seq, size int) string {
	p := newRDPlan(0, size)
	switch {
	case seq == 0:
		return "fold"
	case seq > p.rounds:
		return "unfold"
	}
	return fmt.Sprintf("round %d", seq)
}

// Trace runs one operation on len(bufs) cores in one goroutine, in lockstep:
// every message of a step is delivered before any message of the next. It
// returns every rank's buffer at the start and after each step, and leaves
// the results in bufs. Trace drives the same Core that the transports drive,
// with one sub-chunk per chunk, so that each step moves whole chunks. algo
// is an AllReduce's algorithm (AlgoAuto runs the ring); other kinds take
// AlgoAuto.
func Trace(kind Kind, algo Algorithm, bufs [][]float32, reduce ReduceOp, root int) ([]TraceStep, error) {
	P := len(bufs)
	if P == 0 {
		return nil, fmt.Errorf("%w: no ranks", ErrBadArgument)
	}
	n := len(bufs[0])
	for r, b := range bufs {
		if len(b) != n {
			return nil, fmt.Errorf("%w: rank %d holds %d values, rank 0 holds %d", ErrBadArgument, r, len(b), n)
		}
	}
	cfg := DefaultConfig()
	cfg.SubChunkBytes = max(4, 4*n)
	now := time.Unix(0, 0)
	cores := make([]*Core, P)
	var queue []Message
	var done []Completion
	collect := func(c *Core) {
		rd := c.Ready()
		queue = append(queue, rd.Messages...)
		done = append(done, rd.Completions...)
	}
	for r := range cores {
		c, err := NewCore(cfg, 0, r, P, nil)
		if err != nil {
			return nil, err
		}
		cores[r] = c
	}
	snapshot := func(phase string, step int) TraceStep {
		ts := TraceStep{Phase: phase, Step: step, Buffers: make([][]float32, P)}
		for r, b := range bufs {
			ts.Buffers[r] = append([]float32(nil), b...)
		}
		return ts
	}
	steps := []TraceStep{snapshot("start", 0)}
	for r, c := range cores {
		spec := Spec{Kind: kind, Buf: bufs[r], Reduce: reduce, Root: root, Algo: algo}
		if kind == KindAllReduce && algo == AlgoAuto {
			spec.Algo = AlgoRing
		}
		if _, err := c.Start(now, spec); err != nil {
			return nil, err
		}
		collect(c)
	}
	round := 0
	for len(queue) > 0 {
		batch := queue
		queue = nil
		var sent []TraceMsg
		for _, m := range batch {
			if m.Type == MsgData {
				sent = append(sent, TraceMsg{From: m.From, To: m.To, Seq: int(m.Seq)})
			}
			cores[m.To].Step(now, m)
			collect(cores[m.To])
		}
		if len(sent) > 0 {
			round++
			phase, step := tracePhase(kind, round, P)
			if algo == AlgoRecursiveDoubling {
				phase = "recursive-doubling"
			}
			st := snapshot(phase, step)
			st.Data = sent
			steps = append(steps, st)
		}
	}
	var errs []error
	for _, d := range done {
		if d.Err != nil {
			errs = append(errs, d.Err)
		}
	}
	if len(done) != P {
		errs = append(errs, fmt.Errorf("%w: %d of %d ranks completed", ErrMismatch, len(done), P))
	}
	return steps, errors.Join(errs...)
}

func tracePhase(kind Kind, round, P int) (string, int) {
	switch kind {
	case KindAllReduce:
		if round <= P-1 {
			return "reduce-scatter", round
		}
		return "all-gather", round - (P - 1)
	case KindReduceScatter:
		return "reduce-scatter", round
	case KindAllGather:
		return "all-gather", round
	case KindBroadcast:
		return "broadcast", round
	case KindNaiveAllReduce:
		if round == 1 {
			return "gather", 1
		}
		return "scatter", round - 1
	}
	return kind.String(), round
}
