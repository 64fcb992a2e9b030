package checkpoint

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// BusyPolicy says what AsyncSaver.Save does while the previous checkpoint
// is still being written: never two writes at once.
type BusyPolicy uint8

const (
	// WaitWhenBusy blocks until the previous write ends, then snapshots:
	// every requested checkpoint is written, and the loop's pause grows
	// when writes take longer than the interval between checkpoints.
	WaitWhenBusy BusyPolicy = iota
	// SkipWhenBusy drops the request (no snapshot, no pause): the loop
	// never waits, and a checkpoint is missed when writes are slow.
	SkipWhenBusy
)

// String returns "wait" or "skip".
func (p BusyPolicy) String() string {
	switch p {
	case WaitWhenBusy:
		return "wait"
	case SkipWhenBusy:
		return "skip"
	}
	return fmt.Sprintf("BusyPolicy(%d)", uint8(p))
}

// SaverConfig configures an AsyncSaver.
type SaverConfig struct {
	// Dir is the checkpoint root directory.
	Dir string
	// Keep is how many committed checkpoints to keep (--keep); 0 keeps all.
	Keep int
	// WhenBusy is what Save does while a write is in flight.
	WhenBusy BusyPolicy
}

// DefaultSaverConfig keeps the last 3 checkpoints in dir and waits when
// busy.
func DefaultSaverConfig(dir string) SaverConfig {
	return SaverConfig{Dir: dir, Keep: 3, WhenBusy: WaitWhenBusy}
}

// Validate checks the configuration.
func (c SaverConfig) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: no checkpoint directory", ErrConfig)
	}
	if c.Keep < 0 {
		return fmt.Errorf("%w: keep %d < 0", ErrConfig, c.Keep)
	}
	if c.WhenBusy > SkipWhenBusy {
		return fmt.Errorf("%w: unknown busy policy %v", ErrConfig, c.WhenBusy)
	}
	return nil
}

// SaveStats is what one AsyncSaver.Save cost the training loop.
type SaveStats struct {
	// Step is the step of the snapshot (0 when skipped).
	Step int64
	// Skipped: a write was in flight and the policy is SkipWhenBusy.
	Skipped bool
	// Wait is the time spent waiting for the previous write.
	Wait time.Duration
	// Copy is the time spent taking the snapshot.
	Copy time.Duration
}

// Pause is the time the training loop stood still: Wait + Copy.
func (s SaveStats) Pause() time.Duration { return s.Wait + s.Copy }

// WriteResult is the outcome of one background write.
type WriteResult struct {
	Step int64
	// Dir is the committed checkpoint's directory.
	Dir string
	// Bytes is the size of its shard files.
	Bytes int64
	// Duration is the write and commit time.
	Duration time.Duration
	// AlreadyCommitted: the step was already the latest checkpoint, so
	// nothing was written (not an error).
	AlreadyCommitted bool
	// Err is nil on success; an error wrapping ErrPrune leaves the
	// checkpoint committed.
	Err error
}

// GBps is the write throughput in 10⁹ bytes per second.
func (r WriteResult) GBps() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Duration.Seconds() / 1e9
}

// SaverOption sets an optional collaborator of an AsyncSaver.
type SaverOption func(*AsyncSaver)

// WithOnWritten calls f after every background write, from the saver's
// goroutine (f must not call the saver).
func WithOnWritten(f func(WriteResult)) SaverOption { return func(a *AsyncSaver) { a.onWritten = f } }

// WithClock replaces time.Now for the pause and duration measurements.
func WithClock(now func() time.Time) SaverOption { return func(a *AsyncSaver) { a.now = now } }

// AsyncSaver saves checkpoints in the background: Save takes a snapshot at
// a step boundary (the loop's whole pause) and hands it to the saver's one
// goroutine, which writes and commits it while training goes on.
//
// Threading: Save, Wait and Close are called by one goroutine, the
// training loop's; they are not safe for concurrent use.
type AsyncSaver struct {
	fsys      FS
	cfg       SaverConfig
	onWritten func(WriteResult)
	now       func() time.Time

	snap     *Snapshot
	requests chan *Snapshot   // unbuffered: the writer is idle when Save sends
	results  chan WriteResult // one per request
	stopped  chan struct{}    // closed when the writer goroutine returns
	inFlight bool
	closed   bool
	last     WriteResult
}

// NewAsyncSaver starts a saver writing to fsys under cfg.Dir.
func NewAsyncSaver(fsys FS, cfg SaverConfig, opts ...SaverOption) (*AsyncSaver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &AsyncSaver{fsys: fsys, cfg: cfg, now: time.Now, snap: &Snapshot{},
		requests: make(chan *Snapshot), results: make(chan WriteResult, 1), stopped: make(chan struct{})}
	for _, o := range opts {
		o(a)
	}
	go a.run()
	return a, nil
}

// run is the writer goroutine; it stops when requests is closed.
func (a *AsyncSaver) run() {
	defer close(a.stopped)
	for snap := range a.requests {
		start := a.now()
		m, err := Save(a.fsys, a.cfg.Dir, snap, a.cfg.Keep)
		r := WriteResult{Step: snap.Meta.Step, Duration: a.now().Sub(start)}
		switch {
		case errors.Is(err, ErrCommitted):
			r.AlreadyCommitted = true
		case m != nil:
			r.Dir, r.Bytes, r.Err = filepath.Join(a.cfg.Dir, StepDirName(m.Step)), m.Bytes(), err
		default:
			r.Err = err
		}
		if a.onWritten != nil {
			a.onWritten(r)
		}
		a.results <- r
	}
}

// collect takes the finished write's result.
func (a *AsyncSaver) collect(r WriteResult) error {
	a.inFlight = false
	a.last = r
	if r.Err != nil {
		return fmt.Errorf("%w of step %d: %w", ErrWrite, r.Step, r.Err)
	}
	return nil
}

// Save checkpoints the state capture puts into the snapshot it is given
// (reset, with its buffers from the last save): capture runs on the
// caller's goroutine, at the step boundary, and should only copy (e.g.
// Snapshot.AddModel and filling Meta); the snapshot belongs to the saver
// once capture returns. While the previous write is in flight Save waits
// for it or skips, as SaverConfig.WhenBusy says.
//
// An error of the previous write is returned by the next Save (or Wait or
// Close) and the new checkpoint is then not taken; calling Save again
// retries. An error from capture is returned as it is.
func (a *AsyncSaver) Save(capture func(*Snapshot) error) (SaveStats, error) {
	if a.closed {
		return SaveStats{}, ErrClosed
	}
	var st SaveStats
	if a.inFlight {
		if a.cfg.WhenBusy == SkipWhenBusy {
			select {
			case r := <-a.results:
				if err := a.collect(r); err != nil {
					return st, err
				}
			default:
				st.Skipped = true
				return st, nil
			}
		} else {
			t0 := a.now()
			r := <-a.results
			st.Wait = a.now().Sub(t0)
			if err := a.collect(r); err != nil {
				return st, err
			}
		}
	}
	t0 := a.now()
	a.snap.Reset()
	if err := capture(a.snap); err != nil {
		return st, err
	}
	st.Copy = a.now().Sub(t0)
	st.Step = a.snap.Meta.Step
	a.inFlight = true
	a.requests <- a.snap
	return st, nil
}

// Wait blocks until no write is in flight and returns that write's error.
func (a *AsyncSaver) Wait() error {
	if !a.inFlight {
		return nil
	}
	return a.collect(<-a.results)
}

// Last returns the result of the last write collected by Save or Wait.
func (a *AsyncSaver) Last() WriteResult { return a.last }

// Close waits for the write in flight, stops the goroutine and returns the
// write's error. Later calls of Save fail with ErrClosed.
func (a *AsyncSaver) Close() error {
	if a.closed {
		return nil
	}
	err := a.Wait()
	a.closed = true
	close(a.requests)
	<-a.stopped
	return err
}
