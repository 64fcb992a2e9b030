package leader

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// asyncCore drives a leader core of asynchronous training by hand: the
// members answer its calls at once.
type asyncCore struct {
	t    *testing.T
	c    *Core
	gen  uint64
	size int
}

func newAsyncCore(t *testing.T, resume bool) *asyncCore {
	cfg := Config{PP: 1, MicroBatches: 1, Batch: 8, Target: 100, Async: true, Resume: resume,
		LostStageTimeout: 10 * time.Second, RetryDelay: 3 * time.Second}
	return &asyncCore{t: t, c: New(cfg, time.Unix(1000, 0))}
}

// commit commits a world of n members led by this node, with ck the latest
// checkpoint, and answers the status call with applied (each member's
// Applied: a replica's is the latest step it computed).
func (a *asyncCore) commit(ck Checkpoint, applied ...int) []Out {
	a.t.Helper()
	a.gen++
	a.size = len(applied)
	w := elastic.World{Gen: a.gen, Reason: "test"}
	for i := range applied {
		w.Members = append(w.Members, elastic.Member{ID: fmt.Sprintf("m%d", i), Name: fmt.Sprintf("n%d", i+1), ActorAddr: fmt.Sprintf("127.0.0.1:%d", 9000+i)})
	}
	a.c.Commit(w, true, ck)
	call := a.onlyCall(workerpb.StatusRequest{})
	replies := make([]any, len(call.Msgs))
	for i := range replies {
		replies[i] = &workerpb.Status{Peer: uint32(i), HeldPart: 0, Applied: uint64(applied[i])}
	}
	a.c.Replies(a.gen, call.Phase, replies, nil)
	return a.c.Ready()
}

// onlyCall takes the core's call (after the stop of a generation still
// training), of messages like want.
func (a *asyncCore) onlyCall(want any) *Call {
	a.t.Helper()
	out := a.c.Ready()
	if len(out) == 2 && out[0].Stop == a.gen-1 {
		out = out[1:]
	}
	if len(out) != 1 || out[0].Call == nil {
		a.t.Fatalf("want one call of %T, got %+v", want, out)
	}
	return out[0].Call
}

// form answers the form call in outs (every member formed, each replica's
// checksum its own) and returns the train order.
func (a *asyncCore) form(outs []Out) *TrainOrder {
	a.t.Helper()
	if len(outs) != 1 || outs[0].Call == nil {
		a.t.Fatalf("want the form call, got %+v", outs)
	}
	call := outs[0].Call
	replies := make([]any, len(call.Msgs))
	for i, m := range call.Msgs {
		f := m.(*workerpb.Form)
		// Every member is a replica of its own: a world of one.
		if f.Dp != 1 || f.Pp != 1 || f.Tp != 1 || f.Rank != 0 || len(f.Addrs) != 1 || f.Source != uint32(worker.FromSeed) {
			a.t.Fatalf("member %d's form: %v, want a world of one built from the seed", i, f)
		}
		replies[i] = &workerpb.Formed{Peer: uint32(i), Checksum: uint64(i + 1)} // replicas differ
	}
	a.c.Replies(a.gen, call.Phase, replies, nil)
	out := a.c.Ready()
	if len(out) != 1 || out[0].Train == nil {
		a.t.Fatalf("want the train order, got %+v", out)
	}
	o := out[0].Train
	if o.Layout.Mesh.DP != a.size || o.Batch != 8 || o.LRScale != 1 {
		a.t.Fatalf("train order %+v, want dp %d, the whole batch of 8, no LR scaling", o, a.size)
	}
	return o
}

var noCheckpoint = Checkpoint{Err: fmt.Errorf("%w: none written", checkpoint.ErrNoCheckpoint)}

// The leader core of asynchronous training: a fresh job starts from the
// seed; a generation this node leads next continues from the servers it
// kept (whatever the checkpoint), unless a member computed past them; a
// new leader continues from the latest checkpoint; trained with neither, the servers' state is lost and the
// job ends naming it; at the target the job ends without comparing the
// replicas (they differ by design).
func TestLeaderAsync(t *testing.T) {
	a := newAsyncCore(t, false)
	o := a.form(a.commit(Checkpoint{Step: 40, Cursor: 320}, 0, 0, 0)) // a checkpoint of another job: not resumed
	if o.Layout.Source.Kind != worker.FromSeed || o.Layout.Step != 0 || o.StateFrom != "seed" {
		t.Fatalf("fresh job: %+v from %q, want the seed at step 0", o.Layout.Source, o.StateFrom)
	}

	a.c.KeepServers(&ServerState{Step: 57, Cursor: data.Cursor(57 * 8)})
	o = a.form(a.commit(Checkpoint{Step: 50, Cursor: 400}, 57, 55))
	if o.Layout.Source.Kind != worker.FromReplica || o.Layout.Step != 57 || o.Layout.Cursor != 57*8 || o.StateFrom != "the parameter servers" {
		t.Fatalf("kept servers: %+v at step %d, from %q; want the servers at step 57", o.Layout.Source, o.Layout.Step, o.StateFrom)
	}

	// Kept servers behind a member's latest step (another leader trained
	// in a generation this node did not see) are not continued from.
	a.c.KeepServers(&ServerState{Step: 57, Cursor: data.Cursor(57 * 8)})
	o = a.form(a.commit(Checkpoint{Step: 60, Cursor: 480}, 0, 64))
	if o.Layout.Source.Kind != worker.FromCheckpoint || o.Layout.Step != 60 {
		t.Fatalf("servers behind: %+v at step %d, want checkpoint step 60", o.Layout.Source, o.Layout.Step)
	}

	a.c.KeepServers(nil)
	o = a.form(a.commit(Checkpoint{Step: 50, Cursor: 400}, 61, 0))
	if o.Layout.Source.Kind != worker.FromCheckpoint || o.Layout.Source.Step != 50 || o.Layout.Step != 50 || o.Layout.Cursor != 400 {
		t.Fatalf("new leader: %+v at step %d, want checkpoint step 50", o.Layout.Source, o.Layout.Step)
	}

	// At the target the job ends: no checksum is asked for.
	a.c.Trained(a.gen, nil)
	out := a.c.Ready()
	if len(out) != 1 || out[0].Call == nil || len(out[0].Call.Msgs) != 2 {
		t.Fatalf("after the target: %+v, want the finish call", out)
	}
	if f, ok := out[0].Call.Msgs[0].(*workerpb.Finish); !ok || f.Step != 100 || f.Failure != nil {
		t.Fatalf("after the target: %v, want Finish at step 100", out[0].Call.Msgs[0])
	}

	// Trained, without servers or a checkpoint: nothing holds the state.
	b := newAsyncCore(t, false)
	out = b.commit(noCheckpoint, 30, 0)
	if len(out) != 1 || out[0].Call == nil {
		t.Fatalf("lost servers: %+v, want the finish call", out)
	}
	f, ok := out[0].Call.Msgs[0].(*workerpb.Finish)
	if err := f.GetFailure().Err(); !ok || !errors.Is(err, ErrStageLost) {
		t.Fatalf("lost servers: finish %v, want ErrStageLost", f)
	}

	// Resume: a fresh job takes the latest checkpoint.
	c := newAsyncCore(t, true)
	o = c.form(c.commit(Checkpoint{Step: 40, Cursor: 320}, 0))
	if o.Layout.Source.Kind != worker.FromCheckpoint || o.Layout.Step != 40 {
		t.Fatalf("resume: %+v at step %d, want checkpoint step 40", o.Layout.Source, o.Layout.Step)
	}
}
