package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// panicGate is a gate that panics: a stand-in for a worker that fails
// half-way through a step (a CUDA allocation failure is a panic).
type panicGate struct{}

func (panicGate) Hold() bool { panic("out of device memory") }
func (panicGate) Release()   {}

// shells spawns n worker actors of one local world and a group over them.
func shells(t *testing.T, spec *Spec, n int, gate Gate, notify func(any)) (*actors.System, []*Shell, *actors.Group) {
	t.Helper()
	sys, err := actors.NewSystem(actors.SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	var comms []collective.Communicator
	if n > 1 {
		cc := actors.DefaultCommConfig()
		cc.Collective.Timeout = time.Minute
		if comms, err = actors.StartLocal(sys, n, cc); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]*Shell, n)
	pids := make([]*actor.PID, n)
	for r := range out {
		w, err := New(spec, cpu.New(1))
		if err != nil {
			t.Fatal(err)
		}
		cfg := ShellConfig{Name: fmt.Sprintf("%s-w%d", t.Name(), r), Gate: gate, Notify: notify}
		if comms != nil {
			comm := comms[r]
			cfg.Comms = func(*workerpb.Form) (collective.Communicator, error) { return comm, nil }
		}
		if out[r], err = Spawn(sys, w, cfg); err != nil {
			t.Fatal(err)
		}
		pids[r] = out[r].PID()
		t.Cleanup(out[r].Stop)
	}
	g, err := actors.NewGroup(sys, actors.GroupConfig{Name: t.Name() + "-group", Peers: pids, CallTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	forms := make([]any, n)
	for r := range forms {
		forms[r] = &workerpb.Form{Peer: uint32(r), Generation: 1, Dp: uint32(n), Pp: 1, Tp: 1, Rank: int32(r)}
	}
	if _, err := g.Call(context.Background(), forms); err != nil {
		t.Fatal(err)
	}
	return sys, out, g
}

func steps(n int, s setup) []any {
	msgs := make([]any, n)
	for r := range msgs {
		msgs[r] = &workerpb.RunStep{Peer: uint32(r), Generation: 1, Batch: uint32(s.batch), Lr: 1e-2, GlobalTargets: uint64(s.globalTargets(s.batch))}
	}
	return msgs
}

// A worker that panics answers the request in flight with a crash naming
// its actor, tells its node, and stops: later calls fail at once.
func TestShellCrashStopsTheWorker(t *testing.T) {
	s := mlpSetup(t)
	notified := make(chan any, 1)
	_, _, g := shells(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0), 1, panicGate{}, func(m any) { notified <- m })
	_, err := g.Call(context.Background(), steps(1, s))
	if !errors.Is(err, ErrCrashed) || !strings.Contains(err.Error(), "out of device memory") || !strings.Contains(err.Error(), "-w0") {
		t.Fatalf("step on a crashing worker: %v", err)
	}
	if failure.CodeOf(err) != failure.Crashed {
		t.Errorf("code %s", failure.CodeOf(err))
	}
	select {
	case m := <-notified:
		if e, ok := m.(error); !ok || !errors.Is(e, ErrCrashed) {
			t.Errorf("the node was told %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node was not told of the crash")
	}
	if _, err := g.Call(context.Background(), []any{&workerpb.StatusRequest{}}); !errors.Is(err, collective.ErrPeerLost) {
		t.Fatalf("a call after the crash: %v", err)
	}
}

// Abort cuts a step short: a rank whose peer never runs the step would
// wait for the collective timeout; aborted, it answers at once, cancelled,
// and nothing was applied.
func TestShellAbortStopsAStepInFlight(t *testing.T) {
	s := mlpSetup(t)
	sys, _, g := shells(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0), 2, nil, nil)
	msgs := steps(2, s)
	msgs[1] = nil // rank 1 never joins the all-reduce
	done := make(chan error, 1)
	go func() {
		_, err := g.Call(context.Background(), msgs)
		done <- err
	}()
	// The abort goes to the control actor, as a trainer in another process
	// sends it; the step may not have started yet, so repeat it until the
	// call ends (an abort with nothing in flight does nothing).
	for {
		sys.Root().Send(actor.NewPID(sys.Address(), ControlName(t.Name()+"-w0")), &workerpb.Abort{Reason: "test"})
		select {
		case err := <-done:
			if !errors.Is(err, collective.ErrCanceled) || !failure.Transient(err) {
				t.Fatalf("aborted step: %v", err)
			}
			replies, err := g.Call(context.Background(), []any{&workerpb.StatusRequest{Peer: 0}, nil})
			if err != nil || replies[0].(*workerpb.Status).Applied != 0 {
				t.Fatalf("status after the abort: %v, %v", replies, err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A worker keeps the loss scaler's state a step ran with (scale and growth
// tracker, from the request) with its last step, and its status tells it:
// whoever takes the training state from this worker can continue the
// scaler from it.
func TestShellStatusKeepsTheScalerState(t *testing.T) {
	s := mlpSetup(t)
	_, _, g := shells(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0), 1, nil, nil)
	step := steps(1, s)
	rs := step[0].(*workerpb.RunStep)
	rs.LossScale, rs.LossScaleTracker = 1024, 7
	if _, err := g.Call(context.Background(), step); err != nil {
		t.Fatal(err)
	}
	replies, err := g.Call(context.Background(), []any{&workerpb.StatusRequest{Peer: 0}})
	if err != nil {
		t.Fatal(err)
	}
	st := replies[0].(*workerpb.Status)
	if st.LastStep != 0 || st.Applied != 1 || st.LastLossScale != 1024 || st.LastLossScaleTracker != 7 || st.LastSkipped {
		t.Errorf("status after a step at scale 1024, tracker 7: last step %d, applied %d, scale %v, tracker %d, skipped %v",
			st.LastStep, st.Applied, st.LastLossScale, st.LastLossScaleTracker, st.LastSkipped)
	}
}

// A worker's weights come as bytes for a caller elsewhere and as values
// for one in its process, the same weights either way; each answer is the
// caller's own copy (a later step does not change it).
func TestShellWeightsAsBytesOrValues(t *testing.T) {
	s := mlpSetup(t)
	_, _, g := shells(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0), 1, nil, nil)
	ask := func(floats bool) *workerpb.Weights {
		t.Helper()
		replies, err := g.Call(context.Background(), []any{&workerpb.WeightsRequest{Peer: 0, Generation: 1, Floats: floats}})
		if err != nil {
			t.Fatal(err)
		}
		return replies[0].(*workerpb.Weights)
	}
	if _, err := g.Call(context.Background(), steps(1, s)); err != nil {
		t.Fatal(err)
	}
	b, v := ask(false), ask(true)
	if v.Data != nil || b.Values != nil {
		t.Fatalf("bytes asked: %d values; values asked: %d bytes", len(b.Values), len(v.Data))
	}
	w, err := BytesFloats(b.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) == 0 || len(w) != len(v.Values) {
		t.Fatalf("%d weights as bytes, %d as values", len(w), len(v.Values))
	}
	kept := append([]float32(nil), v.Values...)
	for i := range w {
		if math.Float32bits(w[i]) != math.Float32bits(v.Values[i]) {
			t.Fatalf("weight %d: %v as bytes, %v as values", i, w[i], v.Values[i])
		}
	}
	step := steps(1, s)
	step[0].(*workerpb.RunStep).Step = 1
	if _, err := g.Call(context.Background(), step); err != nil {
		t.Fatal(err)
	}
	after, changed := ask(true).Values, false
	for i := range kept {
		if math.Float32bits(kept[i]) != math.Float32bits(v.Values[i]) {
			t.Fatalf("weight %d of the answer changed with the next step", i)
		}
		changed = changed || after[i] != kept[i]
	}
	if !changed {
		t.Fatal("the next step changed no weight: the test shows nothing")
	}
}
