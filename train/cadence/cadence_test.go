package cadence

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/failure"
)

// drive runs c to its end with steps completing in order as soon as the
// window allows, and returns the steps (counted from 1) after which it
// asked for an evaluation and a checkpoint.
func drive(t *testing.T, c *Cadence) (evals, saves []int) {
	t.Helper()
	for !c.Finished() {
		for {
			if _, ok := c.Next(); !ok {
				break
			}
			c.Started()
		}
		if c.Running() == 0 {
			t.Fatalf("after step %d: nothing in flight and nothing to start", c.Completed())
		}
		a := c.Done(1, nil)
		if a.Err != nil {
			t.Fatal(a.Err)
		}
		if a.Evaluate {
			evals = append(evals, a.Step)
		}
		if a.Save {
			saves = append(saves, a.Step)
		}
		if a.Stop {
			break
		}
	}
	return evals, saves
}

func TestCadenceEvalAndCheckpointSteps(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cfg          Config
		evals, saves []int
	}{
		{"every", Config{Steps: 10, Eval: true, EvalEvery: 3, CkptEvery: 4, Save: true, SaveLast: true}, []int{3, 6, 9, 10}, []int{4, 8}},
		{"last step saved", Config{Steps: 8, Eval: true, CkptEvery: 4, Save: true, SaveLast: true}, []int{8}, []int{4, 8}},
		{"simulator: last step not saved", Config{Steps: 8, CkptEvery: 4, Save: true}, nil, []int{4}},
		{"no held-out data", Config{Steps: 6, EvalEvery: 2}, nil, nil},
		{"no checkpointer", Config{Steps: 6, CkptEvery: 2}, nil, nil},
		{"resumed", Config{From: 5, Steps: 10, Eval: true, EvalEvery: 3, CkptEvery: 4, Save: true, SaveLast: true}, []int{6, 9, 10}, []int{8}},
		{"stop after", Config{Steps: 10, StopAfter: 5, Eval: true, EvalEvery: 3, CkptEvery: 4, Save: true, SaveLast: true}, []int{3}, []int{4}},
		{"window", Config{Steps: 10, Window: 3, Eval: true, EvalEvery: 3, CkptEvery: 4, Save: true, SaveLast: true}, []int{3, 6, 9, 10}, []int{4, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evals, saves := drive(t, New(tc.cfg))
			if !slices.Equal(evals, tc.evals) || !slices.Equal(saves, tc.saves) {
				t.Errorf("evaluations after %v and checkpoints after %v, want %v and %v", evals, saves, tc.evals, tc.saves)
			}
		})
	}
}

// A step followed by an evaluation, a checkpoint or the run's end
// completes with no later step in flight beside it.
func TestCadenceWindowQuietsBeforeEvalAndCheckpoint(t *testing.T) {
	c := New(Config{Steps: 7, Window: 4, Eval: true, EvalEvery: 5, CkptEvery: 3, Save: true, SaveLast: true})
	var starts [][]int // the steps started at each turn
	for !c.Finished() {
		var turn []int
		for {
			s, ok := c.Next()
			if !ok {
				break
			}
			c.Started()
			turn = append(turn, s)
		}
		starts = append(starts, turn)
		c.Done(1, nil)
	}
	// Steps 3 and 6 (counted from 1) are followed by a checkpoint, 5 by
	// an evaluation and 7 by the end: nothing after them starts until
	// they completed.
	want := [][]int{{0, 1, 2}, nil, nil, {3, 4}, nil, {5}, {6}}
	if len(starts) != len(want) {
		t.Fatalf("starts %v, want %v", starts, want)
	}
	for i := range want {
		if !slices.Equal(starts[i], want[i]) {
			t.Fatalf("starts %v, want %v", starts, want)
		}
	}
}

func TestCadenceNonFiniteLossDiverges(t *testing.T) {
	for _, loss := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		c := New(Config{Steps: 4, CkptEvery: 1, Save: true, SaveLast: true})
		c.Started()
		a := c.Done(loss, nil)
		if !errors.Is(a.Err, ErrLoss) || failure.CodeOf(a.Err) != failure.Diverged || failure.Transient(a.Err) {
			t.Errorf("loss %v: %v, want ErrLoss of class diverged", loss, a.Err)
		}
		if a.Save || a.Evaluate || a.Stop {
			t.Errorf("loss %v: %+v, want nothing done after a diverged step", loss, a)
		}
	}
}

// salvagedError stands for train's adopted step: failed on some ranks,
// completed on another replica.
type salvagedError struct{ error }

func (e salvagedError) Unwrap() error { return e.error }

func TestCadenceFailedAndSalvagedSteps(t *testing.T) {
	lost := failure.Wrapf(failure.PeerLost, "member n2 failed")
	for _, tc := range []struct {
		name     string
		err      error
		salvaged bool
	}{
		{"failed", lost, false},
		{"salvaged", salvagedError{lost}, true},
	} {
		c := New(Config{Steps: 4, Salvaged: func(err error) bool { return errors.As(err, new(salvagedError)) }})
		c.Started()
		c.Done(1, nil)
		c.Started()
		a := c.Done(0, tc.err)
		if a.Step != 2 || a.Salvaged != tc.salvaged || !errors.Is(a.Err, lost) || !failure.Transient(a.Err) {
			t.Errorf("%s: %+v, want step 2's transient error, salvaged %v", tc.name, a, tc.salvaged)
		}
	}
}

func TestCadenceSupersedeStopsStarts(t *testing.T) {
	c := New(Config{Steps: 4, Window: 2})
	c.Started()
	cause := errors.New("generation 3 committed")
	err := c.Supersede(cause)
	if _, ok := c.Next(); ok {
		t.Fatal("a step starts after Supersede")
	}
	if a := c.Done(1, nil); a.Err != nil || a.Stop {
		t.Fatalf("the step in flight: %+v, want it reported", a)
	}
	if got := c.Stopped(); got != err || !errors.Is(got, cause) || failure.CodeOf(got) != failure.Canceled {
		t.Fatalf("Stopped() = %v, want %v of class canceled", got, err)
	}
	if err := c.Cancel(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Cancel: %v", err)
	}
}
