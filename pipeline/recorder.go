package pipeline

import (
	"fmt"
	"sync"
	"time"
)

// Recorder collects what stage actors really did in a step, from real
// clocks, into a Timeline that Stats, Gantt and WriteTrace read exactly as
// they read a simulated one. So the bubble a real run prints beside
// FormulaBubble is computed the same way as the simulator's.
//
// The executor records:
//   - every op it runs, with Op(stage, op, start, end): for a receive, start
//     when the message is there and the stage takes it, not when the stage
//     began to wait (waiting is idle time, the bubble);
//   - the activations it actually keeps: Hold when a micro-batch's forward
//     starts keeping tensors (and again when the amount changes: after a
//     checkpointed forward drops all but its input, when a recompute brings
//     them back), Release when its backward has freed them. Peak in-flight
//     micro-batches and bytes then come from what was held, not from the
//     schedule.
//
// Times are stored in seconds since the Recorder's origin; give a
// trace.Writer the same origin and Scale 1e6 to line the two up. A Recorder
// is safe for concurrent use by every stage of a process.
type Recorder struct {
	origin time.Time
	stages int

	mu sync.Mutex
	tl *Timeline
}

// NewRecorder returns a Recorder for P stages whose times count from
// origin.
func NewRecorder(P int, origin time.Time) (*Recorder, error) {
	if P < 1 || P > MaxStages {
		return nil, fmt.Errorf("%w: recorder for %d stages: want 1 to %d", ErrBadArgument, P, MaxStages)
	}
	return &Recorder{origin: origin, stages: P, tl: NewTimeline(P, "s")}, nil
}

// Origin is the instant that time 0 of the timelines stands for.
func (r *Recorder) Origin() time.Time { return r.origin }

func (r *Recorder) seconds(t time.Time) float64 { return t.Sub(r.origin).Seconds() }

func (r *Recorder) check(stage int) error {
	if stage < 0 || stage >= r.stages {
		return fmt.Errorf("%w: stage %d of %d", ErrBadArgument, stage, r.stages)
	}
	return nil
}

// Op records that stage ran op from start to end.
func (r *Recorder) Op(stage int, op Op, start, end time.Time) error {
	if err := r.check(stage); err != nil {
		return err
	}
	if end.Before(start) {
		return fmt.Errorf("%w: stage %d: %v ends before it starts", ErrBadArgument, stage, op)
	}
	sp := Span{Op: op, Start: r.seconds(start), End: r.seconds(end)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tl.Spans[stage] = append(r.tl.Spans[stage], sp)
	return nil
}

// Hold records that from at on, micro-batch micro holds bytes of
// activations on stage (0 if unmeasured: it still counts as alive).
func (r *Recorder) Hold(stage, micro int, bytes int64, at time.Time) error {
	if err := r.check(stage); err != nil {
		return err
	}
	if bytes < 0 {
		return fmt.Errorf("%w: stage %d micro-batch %d holds %d bytes", ErrBadArgument, stage, micro, bytes)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tl.Mem[stage] = append(r.tl.Mem[stage], MemEvent{T: r.seconds(at), Micro: micro, Bytes: bytes})
	return nil
}

// Release records that from at on, micro-batch micro holds nothing on
// stage.
func (r *Recorder) Release(stage, micro int, at time.Time) error {
	if err := r.check(stage); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tl.Mem[stage] = append(r.tl.Mem[stage], MemEvent{T: r.seconds(at), Micro: micro, Released: true})
	return nil
}

// Take returns everything recorded since the last Take (one step, when
// called at each step's end) and starts a fresh timeline.
func (r *Recorder) Take() *Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	tl := r.tl
	r.tl = NewTimeline(r.stages, "s")
	return tl
}
