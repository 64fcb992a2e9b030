package train

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// A replica whose process exits while it is idle (no step's call to see
// it go) is reported lost once, by the exit: TestAsyncKilledReplica found
// no "replica lost" line when the kill landed between two of the
// replica's steps. A step that finds a replica lost first reports it, and
// the exit then says nothing more.
func TestAsyncReplicaLostWhileIdleIsLogged(t *testing.T) {
	sys, err := actors.NewSystem(actors.SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	newExec := func(name string) (*asyncExecutor, *observer.ObservedLogs) {
		pids := statusWorkers(t, sys, name, []*workerpb.Status{{}, {}})
		core, logs := observer.New(zapcore.DebugLevel)
		e := &asyncExecutor{log: zap.New(core), lost: make([]bool, 2), replicas: make([]*groupExecutor, 2),
			inc: make([]int, 2), exited: make([]bool, 2), freed: make(chan struct{})}
		for r := range pids {
			g, err := actors.NewGroup(sys, actors.GroupConfig{Name: fmt.Sprintf("%s-group-%d", name, r), Peers: pids[r : r+1]})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Close)
			e.add(r, &groupExecutor{group: g})
		}
		return e, logs
	}
	lostLines := func(logs *observer.ObservedLogs) int {
		return logs.FilterMessage("replica lost; the job goes on without it").Len()
	}

	// Idle when its process exits: the exit reports it.
	e, logs := newExec("idle")
	e.lose(0, 0, "worker process exited: signal: killed")
	if n := lostLines(logs); n != 1 {
		t.Fatalf("%d \"replica lost\" lines after an idle replica's exit, want 1", n)
	}
	if alive, first := e.markLost(0, e.replicas[0]); alive != 1 || first {
		t.Fatalf("markLost after the exit: %d alive, first %v; want 1 alive, not first", alive, first)
	}
	if e.lost[0] != true || len(e.idle) != 1 || e.idle[0] != 1 {
		t.Fatalf("lost %v, idle %v: want replica 0 lost and only replica 1 idle", e.lost, e.idle)
	}

	// A step's call found it lost first (and said so): the exit adds no
	// line.
	e, logs = newExec("busy")
	if alive, first := e.markLost(0, e.replicas[0]); alive != 1 || !first {
		t.Fatalf("markLost: %d alive, first %v; want 1 alive, first", alive, first)
	}
	e.lose(0, 0, "worker process exited: signal: killed")
	if n := lostLines(logs); n != 0 {
		t.Fatalf("%d \"replica lost\" lines from the exit after a step saw the loss, want 0 (the step logs it)", n)
	}
}
