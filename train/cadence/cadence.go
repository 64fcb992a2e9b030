package cadence

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/failure"
)

// Config is the policy a Cadence follows.
type Config struct {
	// From is the first step to run (0-based): 0, or where a checkpoint or
	// an elastic generation resumes.
	From int
	// Steps is the job's length: no step starts past it, and the last
	// evaluation follows step Steps.
	Steps int
	// StopAfter ends the run after that step when it is earlier than
	// Steps (Options.StopAfter; 0: none).
	StopAfter int
	// Window is how many steps may be in flight at once (executor.Window;
	// less than one means one).
	Window int
	// Eval says there is held-out data; it is evaluated after every
	// EvalEvery steps (0: none between) and after step Steps.
	Eval      bool
	EvalEvery int
	// CkptEvery is the checkpoint interval in steps (0: none); Save says
	// something writes those checkpoints. An interval holds later steps
	// back at its boundaries (see Next) even when nothing writes.
	CkptEvery int
	Save      bool
	// SaveLast takes the checkpoint that falls on step Steps too. The
	// simulator leaves it out, as its leader always has: its sweeps'
	// event schedules, and so the seeds that replay a failure, stay those
	// of earlier builds.
	SaveLast bool
	// Salvaged reports whether a failed step completed on another replica
	// (train's adopted step), so that its metrics may count (After.Salvaged);
	// nil: no failed step is.
	Salvaged func(err error) bool
}

// Cadence is the step loop's policy as a pure core: which step to start
// while others are in flight, what follows a completed step (evaluate,
// checkpoint, stop) and what ends a run (a failed or diverged step, a
// cancellation, a superseded generation, the last step). It holds no
// executor, clock or I/O: train's step loop and the simulator's leader
// (sim/leader.go) feed it events and do what it answers. Not safe for
// concurrent use; its shell calls it from one goroutine.
type Cadence struct {
	cfg Config
	// next is the next step to start and done the count of completed
	// ones (both 0-based step indices); running the steps in between.
	next, done, running int
	// stopped is why no step starts any more (Supersede).
	stopped error
}

// New starts a run's cadence at cfg.From.
func New(cfg Config) *Cadence {
	cfg.Window = max(1, cfg.Window)
	return &Cadence{cfg: cfg, next: cfg.From, done: cfg.From}
}

// After is what follows a completed step, in order: evaluate, save,
// stop. Err set means none of them: the run ends with Err.
type After struct {
	// Step is the completed step, counted from 1 (train.StepMetrics.Step).
	Step int
	// Evaluate and Save ask for the held-out loss and a checkpoint after
	// Step; Stop ends the run (without an error) once they are done.
	Evaluate, Save, Stop bool
	// Err ends the run. Salvaged: the step failed on some ranks but
	// completed on another replica (Config.Salvaged); its metrics go with
	// Err, for the next generation to report if it continues after it.
	Err      error
	Salvaged bool
}

// Next is the step to start now: ok is false while the window is full,
// while a step in flight is followed by something that needs the
// executor quiet (an evaluation, a checkpoint, the end of the run: no
// later step may run beside it), after Supersede, and at the job's end.
func (c *Cadence) Next() (step int, ok bool) {
	if c.stopped != nil || c.running >= c.cfg.Window || c.next >= c.cfg.Steps {
		return 0, false
	}
	if c.next != c.done && c.quietAfter(c.next) {
		return 0, false
	}
	return c.next, true
}

// Started records that the step Next returned was started.
func (c *Cadence) Started() {
	c.next++
	c.running++
}

// Running is the count of started steps not completed yet.
func (c *Cadence) Running() int { return c.running }

// Finished reports whether every step of the job completed.
func (c *Cadence) Finished() bool { return c.done >= c.cfg.Steps }

// Completed is the next step to complete (0-based; under asynchronous
// training steps complete in the order they complete, and this counts
// them).
func (c *Cadence) Completed() int { return c.done }

// Done takes the outcome of the next step to complete: its mean loss, or
// the error it failed with. A non-finite loss ends the run with ErrLoss
// (failure.Diverged: permanent, no checkpoint of the diverged state).
func (c *Cadence) Done(loss float64, err error) After {
	c.running--
	n := c.done + 1
	c.done = n
	a := After{Step: n}
	if err != nil {
		a.Salvaged = c.cfg.Salvaged != nil && c.cfg.Salvaged(err)
		a.Err = fmt.Errorf("train: step %d: %w", n, err)
		return a
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		a.Err = fmt.Errorf("%w: step %d: loss is %v (lower the learning rate or clip the gradients)", ErrLoss, n, loss)
		return a
	}
	cfg := &c.cfg
	a.Evaluate = cfg.Eval && (n == cfg.Steps || cfg.EvalEvery > 0 && n%cfg.EvalEvery == 0)
	a.Save = cfg.Save && cfg.CkptEvery > 0 && n%cfg.CkptEvery == 0 && (cfg.SaveLast || n < cfg.Steps)
	a.Stop = n >= c.total()
	return a
}

// Cancel is the error of a run whose context ended (cause: its cause)
// before the next step started.
func (c *Cadence) Cancel(cause error) error {
	return fmt.Errorf("train: stopped before step %d: %w", c.next+1, cause)
}

// Supersede stops starting steps (an elastic generation superseded by
// cause): the steps in flight complete, or abort on their own, and are
// reported either way; then the run ends with the error it returns, of
// class failure.Canceled.
func (c *Cadence) Supersede(cause error) error {
	if c.stopped == nil {
		c.stopped = fmt.Errorf("train: stopped before step %d: %w", c.next+1, failure.Wrap(failure.Canceled, cause))
	}
	return c.stopped
}

// Stopped is Supersede's error once the last step in flight completed:
// the run ends with it. Without Supersede, a loop left with no step in
// flight and none to start is a bug, and the error says so.
func (c *Cadence) Stopped() error {
	if c.stopped != nil {
		return c.stopped
	}
	return failure.Wrapf(failure.Internal, "train: step %d: no step in flight to wait for", c.done+1)
}

// quietAfter reports whether what follows step n (counted from 1) needs
// the executor quiet: an evaluation, a checkpoint, the end of the run.
func (c *Cadence) quietAfter(n int) bool {
	cfg := &c.cfg
	return n >= c.total() || cfg.CkptEvery > 0 && n%cfg.CkptEvery == 0 || cfg.Eval && cfg.EvalEvery > 0 && n%cfg.EvalEvery == 0
}

// total is the number of steps the run has from the start of training:
// the job's, or fewer with StopAfter.
func (c *Cadence) total() int {
	if c.cfg.StopAfter > 0 && c.cfg.StopAfter < c.cfg.Steps {
		return c.cfg.StopAfter
	}
	return c.cfg.Steps
}
