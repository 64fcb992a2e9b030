package train

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// bareExecutor is an executor of mesh m with setup s and no group: what it
// does without calling its workers (a call would panic).
func bareExecutor(m mesh.Mesh, s execSetup) *groupExecutor {
	cfg := DefaultConfig()
	return newGroupExecutor(nil, nil, execWorld{mesh: m, peers: identity(m.Size())}, s, &cfg, zap.NewNop())
}

// An executor built for a run without a checkpoint directory refuses to
// save with the error it always gave, whichever saver its launcher picks
// for its workers, and without asking them.
func TestExecutorWithoutCheckpointDirectoryCannotSave(t *testing.T) {
	m, _ := mesh.New(2, 1, 1)
	for name, s := range map[string]saver{"in process": capturing(nil), "elsewhere": sharding(nil), "none given": nil} {
		ex := bareExecutor(m, execSetup{saver: s})
		_, err := ex.Save(context.Background(), checkpoint.Meta{Step: 3})
		if !errors.Is(err, errNoCheckpointDir) || err.Error() != "train: this run has no checkpoint directory" {
			t.Errorf("%s: Save: %v, want %q", name, err, errNoCheckpointDir)
		}
	}
	ck := &checkpointer{}
	if s, ok := capturing(ck).(captureSaver); !ok || s.ck != ck {
		t.Errorf("capturing: %#v, want a captureSaver into the checkpointer", capturing(ck))
	}
	if s, ok := sharding(ck).(shardSaver); !ok || s.ck != ck {
		t.Errorf("sharding: %#v, want a shardSaver into the checkpointer", sharding(ck))
	}
}

// Run's launcher builds its executor whole: workers of this process hand
// their weights over in memory, are captured into the run's checkpointer
// (none: the run's error), and a failed step ends the run.
func TestLocalExecutorIsBuiltWhole(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		cfg := tinyMLP()
		cfg.CkptDir = dir
		j, err := openValidJob(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ck, err := newCheckpointer(&j.cfg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		ex, err := startLocal(context.Background(), j, ck, 0, 0, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		want := saver(noSaver{})
		if ck != nil {
			want = captureSaver{ck}
		}
		if ex.saver != want || ex.salvager != (noSalvage{}) || !ex.weightsInMemory {
			t.Errorf("CkptDir %q: saver %#v, salvager %#v, weights in memory %v; want %#v, noSalvage, true", dir, ex.saver, ex.salvager, ex.weightsInMemory, want)
		}
		if err := ex.Close(); err != nil {
			t.Fatal(err)
		}
		if ck != nil {
			ck.close()
		}
	}
}

// A run's failed step is its end: its salvager returns the failure as it
// is, without asking the workers (the executor has no group to ask), and
// an abort is worth the flight recorders (the run ends on it anyway).
func TestRunExecutorDoesNotSalvage(t *testing.T) {
	m, _ := mesh.New(2, 1, 1)
	ex := bareExecutor(m, execSetup{})
	cause := fmt.Errorf("%w: rank 1 left", failure.New(failure.Aborted, "collective: aborted"))
	st, err := ex.salvager.salvage(context.Background(), ex, worker.StepRequest{Step: 4}, cause)
	if err != cause || st.Targets != 0 {
		t.Fatalf("salvage: %+v, %v; want the cause as it is", st, err)
	}
	if !hangLike(cause, ex.salvager.continues()) {
		t.Fatal("a run's aborted step is not hang-like")
	}
	if hangLike(cause, elasticSalvage{}.continues()) {
		t.Fatal("an elastic generation's aborted step is hang-like: it waits for dumps before the next generation")
	}
}

// statusWorkers spawns a worker stand-in per status, named after name,
// that answers a status request with it.
func statusWorkers(t *testing.T, sys *actors.System, name string, statuses []*workerpb.Status) []*actor.PID {
	t.Helper()
	pids := make([]*actor.PID, len(statuses))
	for p, s := range statuses {
		s.Peer = uint32(p)
		pid, err := sys.Root().SpawnNamed(actors.Props(func() actor.Actor {
			return actor.ReceiveFunc(func(c actor.Context) {
				if _, ok := c.Message().(*workerpb.StatusRequest); ok {
					c.Respond(s)
				}
			})
		}), fmt.Sprintf("%s-%d", name, p))
		if err != nil {
			t.Fatal(err)
		}
		pids[p] = pid
	}
	return pids
}

// An elastic generation's failed step counts when every rank ran its
// passes and one replica applied it: its salvager asks the workers and
// returns an *adoptedError with the passes' sums. It does not count when
// no replica applied it, or when a replica is cut into parts (a step torn
// between them is undone).
func TestElasticExecutorSalvages(t *testing.T) {
	sys, err := actors.NewSystem(actors.SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	req := worker.StepRequest{Step: 4}
	ran := func(applied uint64) *workerpb.Status {
		return &workerpb.Status{LastStep: 4, LastComputed: true, Applied: applied, LastLossSum: 1.5, LastTargets: 8, LastCorrect: 3}
	}
	cause := errors.New("rank 1 lost")
	cfg := DefaultConfig()
	for i, c := range []struct {
		statuses []*workerpb.Status
		pp       int
		counts   bool
	}{
		{[]*workerpb.Status{ran(5), ran(4)}, 1, true},
		{[]*workerpb.Status{ran(4), ran(4)}, 1, false},
		{[]*workerpb.Status{ran(5), {LastStep: 4, Applied: 4}}, 1, false},
		{[]*workerpb.Status{ran(5), ran(5)}, 2, false},
	} {
		pids := statusWorkers(t, sys, fmt.Sprintf("worker-%d", i), c.statuses)
		m, _ := mesh.New(len(pids)/c.pp, c.pp, 1)
		w := execWorld{mesh: m, gen: 2, peers: identity(len(pids)), pids: pids, peerName: rankName}
		ex, err := startGroupExecutor(sys, fmt.Sprintf("salvage-%d", i), w, execSetup{salvager: elasticSalvage{}}, &cfg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		_, err = ex.salvager.salvage(context.Background(), ex, req, cause)
		var adopted *adoptedError
		switch {
		case c.counts && (!errors.As(err, &adopted) || adopted.Err != cause || adopted.Stats.LossSum != 3 || adopted.Stats.Targets != 16 || adopted.Stats.Correct != 6):
			t.Errorf("case %d: %v (%+v), want the step adopted with both ranks' sums", i, err, adopted)
		case !c.counts && err != cause:
			t.Errorf("case %d: %v, want the cause as it is", i, err)
		}
		ex.Close()
	}
}
