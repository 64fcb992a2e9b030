package pipeline

import (
	"fmt"
	"slices"
)

// Validate checks that the schedule is complete, ordered and deadlock-free:
//
//   - every stage forwards and backwards every micro-batch exactly once, the
//     forward first; with Recompute, recomputes each once in between;
//   - every stage but the first receives each micro-batch's activation once
//     (from stage − 1) before its forward and sends its input gradient once
//     (to stage − 1) after its backward; every stage but the last sends each
//     activation once (to stage + 1) after its forward and receives each
//     output gradient once (from stage + 1) before its backward;
//   - on each link the receiver takes messages in the order they are sent;
//   - played out (sends never wait, receives wait for their message), every
//     stage runs to its end: no set of stages waits on each other.
func (s *Schedule) Validate() error {
	if err := s.Config().Validate(); err != nil {
		return err
	}
	if len(s.Ops) != s.Stages {
		return fmt.Errorf("%w: %d op lists for %d stages", ErrInvalidSchedule, len(s.Ops), s.Stages)
	}
	for st := range s.Ops {
		if err := s.validateStage(st); err != nil {
			return err
		}
	}
	for st := 0; st+1 < s.Stages; st++ {
		if err := sameOrder(s, st, SendAct, st+1, RecvAct); err != nil {
			return err
		}
		if err := sameOrder(s, st+1, SendGrad, st, RecvGrad); err != nil {
			return err
		}
	}
	// Costs do not matter for deadlock: sends never block, so each stage's
	// run is fixed and only the waits on messages can form a cycle.
	_, err := Simulate(s, UniformCosts(s.Stages, DefaultStageCost()))
	return err
}

// validateStage checks counts, peers and per-micro-batch order on one stage.
func (s *Schedule) validateStage(st int) error {
	M := s.MicroBatches
	// pos[k][m] is the index of stage st's op of kind k on micro-batch m,
	// or -1.
	var pos [numOpKinds][]int
	for k := range pos {
		pos[k] = slices.Repeat([]int{-1}, M)
	}
	for i, op := range s.Ops[st] {
		if op.Kind >= numOpKinds {
			return fmt.Errorf("%w: stage %d op %d: unknown kind %d", ErrInvalidSchedule, st, i, op.Kind)
		}
		if op.Micro < 0 || op.Micro >= M {
			return fmt.Errorf("%w: stage %d op %d (%v): micro-batch out of range [0, %d)", ErrInvalidSchedule, st, i, op, M)
		}
		wantPeer := -1
		switch op.Kind {
		case SendAct, RecvGrad:
			wantPeer = st + 1
		case RecvAct, SendGrad:
			wantPeer = st - 1
		}
		if wantPeer >= s.Stages || op.Peer != wantPeer {
			if wantPeer < 0 || wantPeer >= s.Stages {
				return fmt.Errorf("%w: stage %d op %d (%v): stage %d of %d has no such op", ErrInvalidSchedule, st, i, op, st, s.Stages)
			}
			return fmt.Errorf("%w: stage %d op %d (%v): peer must be stage %d", ErrInvalidSchedule, st, i, op, wantPeer)
		}
		if pos[op.Kind][op.Micro] >= 0 {
			return fmt.Errorf("%w: stage %d op %d (%v): repeats op %d", ErrInvalidSchedule, st, i, op, pos[op.Kind][op.Micro])
		}
		pos[op.Kind][op.Micro] = i
	}
	need := func(k OpKind) bool {
		switch k {
		case Forward, Backward:
			return true
		case Recompute:
			return s.Recompute
		case RecvAct, SendGrad:
			return st > 0
		case SendAct, RecvGrad:
			return st < s.Stages-1
		}
		return false
	}
	for k := range numOpKinds {
		for m, p := range pos[k] {
			if need(k) && p < 0 {
				return fmt.Errorf("%w: stage %d never runs %s of micro-batch %d", ErrInvalidSchedule, st, k, m)
			}
			if !need(k) && p >= 0 {
				return fmt.Errorf("%w: stage %d op %d (%v): not expected without recompute", ErrInvalidSchedule, st, p, s.Ops[st][p])
			}
		}
	}
	// before lists the pairs (a, b): a must come before b for the same
	// micro-batch, when both are in the stage's list.
	before := [][2]OpKind{
		{RecvAct, Forward}, {Forward, SendAct}, {Forward, Backward},
		{Forward, Recompute}, {Recompute, Backward}, {RecvGrad, Backward}, {Backward, SendGrad},
	}
	for _, pr := range before {
		for m := range M {
			a, b := pos[pr[0]][m], pos[pr[1]][m]
			if a >= 0 && b >= 0 && a > b {
				return fmt.Errorf("%w: stage %d runs %v (op %d) before %v (op %d)", ErrInvalidSchedule, st, s.Ops[st][b], b, s.Ops[st][a], a)
			}
		}
	}
	return nil
}

// sameOrder checks that stage to receives, with kind recv, the micro-batches
// that stage from sends with kind send, in the same order.
func sameOrder(s *Schedule, from int, send OpKind, to int, recv OpKind) error {
	sent := microsOf(s.Ops[from], send)
	got := microsOf(s.Ops[to], recv)
	for i := range sent {
		if sent[i] != got[i] {
			return fmt.Errorf("%w: stage %d's %s #%d is micro-batch %d, but stage %d's %s #%d is micro-batch %d: the link would deliver out of order",
				ErrInvalidSchedule, from, send, i, sent[i], to, recv, i, got[i])
		}
	}
	return nil
}

func microsOf(ops []Op, k OpKind) []int {
	var out []int
	for _, op := range ops {
		if op.Kind == k {
			out = append(out, op.Micro)
		}
	}
	return out
}
