package train

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// salvager takes a second look at a step that failed on some ranks
// (groupExecutor.Step): whether it still counts depends on whether a next
// generation continues after the failure, which the executor's builder
// knows.
type salvager interface {
	// salvage returns cause when the step does not count, or an
	// *adoptedError when it does.
	salvage(ctx context.Context, e *groupExecutor, req worker.StepRequest, cause error) (stepStats, error)
	// continues says a next generation takes over after a failure: an
	// abort is then another rank's reaction to a loss the job recovers
	// from, not worth the flight recorders (hangLike).
	continues() bool
}

var (
	_ salvager = noSalvage{}
	_ salvager = elasticSalvage{}
)

// noSalvage is the salvager of a run without a next generation: a failed
// step ends it.
type noSalvage struct{}

func (noSalvage) salvage(_ context.Context, _ *groupExecutor, _ worker.StepRequest, cause error) (stepStats, error) {
	return stepStats{}, cause
}

func (noSalvage) continues() bool { return false }

// adoptedError is a step that failed on some ranks but completed on
// another replica: when the next generation continues from that replica
// (it continues after the step), the step counts. Stats aggregates every
// rank's passes, and Metrics (the step loop fills it) is the step's line;
// the error is why the generation cannot go on.
type adoptedError struct {
	Stats   stepStats
	Metrics StepMetrics
	Err     error
}

func (e *adoptedError) Error() string { return e.Err.Error() }
func (e *adoptedError) Unwrap() error { return e.Err }

// salvageTimeout bounds salvage's question: a live worker answers it
// within milliseconds of the abort, and a silent one (a hung host, a
// stopped process) must not hold the job that already knows the step
// failed.
const salvageTimeout = 2 * time.Second

// elasticSalvage is the salvager of an elastic job's generation. When a
// replica is one part (no pipeline, no tensor parallelism) a replica that
// completed the gradient all-reduce applied the step, and the next
// generation takes every replica's state from the most advanced: when one
// did and every rank ran its passes, the step counts, and its metrics are
// known (an *adoptedError). A step torn between parts is undone instead,
// so it never counts.
type elasticSalvage struct{}

func (elasticSalvage) continues() bool { return true }

func (elasticSalvage) salvage(ctx context.Context, e *groupExecutor, req worker.StepRequest, cause error) (stepStats, error) {
	if e.mesh.Parts() != 1 {
		return stepStats{}, cause
	}
	// Not cancelled with the step: a superseded generation's step is
	// salvaged too, for the next one to report.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), salvageTimeout)
	defer cancel()
	replies, err := e.group.Call(ctx, e.byRank(func(_ int, p uint32) any { return &workerpb.StatusRequest{Peer: p} }))
	if err != nil {
		return stepStats{}, cause
	}
	statuses := make([]*workerpb.Status, len(e.peers))
	for r, p := range e.peers {
		statuses[r] = replies[p].(*workerpb.Status)
	}
	st, ok := adoptable(req, statuses)
	if !ok {
		return stepStats{}, cause
	}
	e.log.Info("a failed step completed on another replica; the next generation continues from it",
		zap.Int("step", req.Step+1), zap.Error(cause))
	return stepStats{}, &adoptedError{Stats: st, Err: cause}
}

// adoptable says whether failed step req counts, given every rank's status
// after it: every rank ran its passes and one applied it. It returns the
// passes' sums.
func adoptable(req worker.StepRequest, statuses []*workerpb.Status) (stepStats, bool) {
	var st stepStats
	applied := false
	for _, s := range statuses {
		if s.LastStep != int64(req.Step) || !s.LastComputed {
			return stepStats{}, false
		}
		applied = applied || s.Applied == uint64(req.Step+1)
		st.LossSum += s.LastLossSum
		st.Targets += int(s.LastTargets)
		st.Correct += int(s.LastCorrect)
	}
	return st, applied
}
