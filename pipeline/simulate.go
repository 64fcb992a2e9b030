package pipeline

import (
	"fmt"
	"math"
	"strings"
)

// StageCost is what one stage's ops cost in the simulator, in any time unit
// (the same for every field and for Costs.Latency).
type StageCost struct {
	// Forward, Backward and Recompute are the times of one micro-batch's
	// forward pass, backward pass and recomputation on this stage.
	Forward, Backward, Recompute float64
	// Send and Recv are the times the stage itself is busy handing a message
	// to the link and taking one off it (copying, serialising).
	Send, Recv float64
	// ActBytes is what one micro-batch's forward keeps alive on the stage
	// until its backward; InputBytes is what it keeps instead under
	// activation checkpointing (the stage input). Only the peak-memory
	// figures of Stats use them; 0 leaves memory unmodelled.
	ActBytes, InputBytes int64
}

// DefaultStageCost is a forward of 1 unit, a backward of 2 (the usual
// estimate for dense layers: the backward computes the gradients of both
// the input and the weights, two matrix products to the forward's one), a
// recomputation as long as the forward, free messages and no memory model.
func DefaultStageCost() StageCost {
	return StageCost{Forward: 1, Backward: 2, Recompute: 1}
}

// Costs is the simulator's input besides the schedule.
type Costs struct {
	// Stages holds one StageCost per stage.
	Stages []StageCost
	// Latency is the time from the end of a send to its message being
	// ready at the receiver (the link's transfer time).
	Latency float64
}

// UniformCosts gives every one of P stages the cost c, with no latency.
func UniformCosts(P int, c StageCost) Costs {
	cs := make([]StageCost, P)
	for i := range cs {
		cs[i] = c
	}
	return Costs{Stages: cs}
}

// Validate reports a cost list that does not fit P stages or a time that
// is negative or not finite.
func (c Costs) Validate(P int) error {
	if len(c.Stages) != P {
		return fmt.Errorf("%w: costs for %d stages, schedule has %d", ErrBadArgument, len(c.Stages), P)
	}
	bad := func(v float64) bool { return v < 0 || math.IsNaN(v) || math.IsInf(v, 0) }
	if bad(c.Latency) {
		return fmt.Errorf("%w: latency %v: want a finite time ≥ 0", ErrBadArgument, c.Latency)
	}
	for s, sc := range c.Stages {
		for _, f := range []struct {
			name string
			v    float64
		}{{"forward", sc.Forward}, {"backward", sc.Backward}, {"recompute", sc.Recompute}, {"send", sc.Send}, {"recv", sc.Recv}} {
			if bad(f.v) {
				return fmt.Errorf("%w: stage %d %s time %v: want a finite time ≥ 0", ErrBadArgument, s, f.name, f.v)
			}
		}
		if sc.ActBytes < 0 || sc.InputBytes < 0 {
			return fmt.Errorf("%w: stage %d activation bytes %d, input bytes %d: want ≥ 0", ErrBadArgument, s, sc.ActBytes, sc.InputBytes)
		}
	}
	return nil
}

func (sc StageCost) of(k OpKind) float64 {
	switch k {
	case Forward:
		return sc.Forward
	case Backward:
		return sc.Backward
	case Recompute:
		return sc.Recompute
	case SendAct, SendGrad:
		return sc.Send
	}
	return sc.Recv
}

// Simulate plays s under costs and returns its timeline. Every op starts as
// soon as the stage has finished its previous op and, for a receive, its
// message has arrived (the send's end plus Latency); sends never wait.
// Each stage is driven by a Cursor, the same core a stage actor runs.
//
// The timeline holds one span per op (zero-length ones included) and the
// activation memory events: a micro-batch is alive on a stage from the
// start of its Forward to the end of its Backward, holding ActBytes, or
// InputBytes between the end of a checkpointed Forward and the start of
// its Recompute. It returns ErrDeadlock, naming what each stuck stage
// waits for, when the stages wait on each other.
func Simulate(s *Schedule, costs Costs) (*Timeline, error) {
	if err := costs.Validate(s.Stages); err != nil {
		return nil, err
	}
	P := s.Stages
	cursors := make([]*Cursor, P)
	for st := range cursors {
		c, err := NewCursor(s, st)
		if err != nil {
			return nil, err
		}
		cursors[st] = c
	}
	type arrivalKey struct {
		to  int
		key msgKey
	}
	arrival := make(map[arrivalKey]float64)
	clock := make([]float64, P)
	tl := NewTimeline(P, "unit")
	for finished := 0; finished < P; {
		progress := false
		finished = 0
		for st, cur := range cursors {
			sc := costs.Stages[st]
			for {
				op, ok := cur.Next()
				if !ok {
					break
				}
				start := clock[st]
				if op.Kind.IsRecv() {
					start = max(start, arrival[arrivalKey{st, msgKey{op.Kind, op.Micro}}])
				}
				end := start + sc.of(op.Kind)
				tl.Spans[st] = append(tl.Spans[st], Span{Op: op, Start: start, End: end})
				switch op.Kind {
				case Forward:
					tl.Mem[st] = append(tl.Mem[st], MemEvent{T: start, Micro: op.Micro, Bytes: sc.ActBytes})
					if s.Recompute {
						tl.Mem[st] = append(tl.Mem[st], MemEvent{T: end, Micro: op.Micro, Bytes: sc.InputBytes})
					}
				case Recompute:
					tl.Mem[st] = append(tl.Mem[st], MemEvent{T: start, Micro: op.Micro, Bytes: sc.ActBytes})
				case Backward:
					tl.Mem[st] = append(tl.Mem[st], MemEvent{T: end, Micro: op.Micro, Released: true})
				case SendAct, SendGrad:
					if op.Peer < 0 || op.Peer >= P {
						return nil, fmt.Errorf("%w: stage %d: %v: no such stage", ErrInvalidSchedule, st, op)
					}
					msg := MessageOf(st, op)
					if err := cursors[op.Peer].Deliver(msg); err != nil {
						return nil, fmt.Errorf("%w: %w", ErrInvalidSchedule, err)
					}
					arrival[arrivalKey{op.Peer, msgKey{recvKind(op.Kind), op.Micro}}] = end + costs.Latency
				}
				if err := cur.Done(op); err != nil {
					return nil, err
				}
				clock[st] = end
				progress = true
			}
			if cur.Finished() {
				finished++
			}
		}
		if !progress && finished < P {
			return nil, deadlockError(cursors)
		}
	}
	return tl, nil
}

func deadlockError(cursors []*Cursor) error {
	var b strings.Builder
	for _, c := range cursors {
		if op, ok := c.Waiting(); ok {
			fmt.Fprintf(&b, "; stage %d waits for %v (op %d of %d)", c.Stage(), op, c.Position(), c.Len())
		}
	}
	return fmt.Errorf("%w%s", ErrDeadlock, b.String())
}
