package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/train/cadence"
	"github.com/troupe-ml/troupe/train/leader"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// leaderShell does what a node's leader core asks, as the agent does:
// calls to the members with a timeout, the generation's step loop, and
// requests to the membership.
type leaderShell struct {
	n     *node
	calls uint64
	call  *pendingCall
	loop  *stepLoop
}

type pendingCall struct {
	id       uint64
	gen      uint64
	phase    leader.Phase
	replies  []any
	got      int
	deadline time.Duration // virtual time
	form     bool
}

// stepLoop is the generation's step loop on its leader (the Trainer's).
type stepLoop struct {
	gen   uint64
	order leader.TrainOrder
	// cad is the trainer's cadence: which step to run, when to save.
	cad      *cadence.Cadence
	step     int
	cursor   uint64
	ranks    []string // node ID of each rank
	done     []bool
	got      int
	deadline time.Duration // virtual time
	saving   bool          // waiting for rank 0's checkpoint (or the parts' shards)
	// tmp is the save's temporary directory and shards the parts' written
	// shards, by part, for a model in parts.
	tmp    string
	fs     *checkpoint.MemFS
	shards []savedMsg
	wrote  int
}

// apply does what the leader core asked, in order.
func (l *leaderShell) apply() {
	n := l.n
	for _, o := range n.lead.Ready() {
		switch {
		case o.Call != nil:
			l.startCall(o.Call)
		case o.Train != nil:
			l.startLoop(o.Train)
		case o.Stop != 0:
			if l.loop != nil && l.loop.gen == o.Stop {
				l.loop = nil
			}
		case o.Request != "":
			n.s.tracef("%s asks for a new generation: %s", n.id, o.Request)
			n.core.Request(o.Request)
			n.flush()
		case o.Wait != "":
			n.s.tracef("%s waits: %s", n.id, o.Wait)
		case o.Done:
			n.finish(o.Err)
		}
	}
}

func (l *leaderShell) stop() { l.call, l.loop = nil, nil }

func (l *leaderShell) startCall(c *leader.Call) {
	n := l.n
	l.calls++
	p := &pendingCall{id: l.calls, gen: c.Gen, phase: c.Phase, replies: make([]any, len(c.Msgs)),
		deadline: n.s.clk.now + callTimeout}
	l.call = p
	for i, m := range c.Msgs {
		_, p.form = m.(*workerpb.Form)
		n.s.send(n.id, n.world.Members[i].ID, callMsg{world: n.world, gen: c.Gen, call: p.id, i: i, msg: m})
	}
}

func (l *leaderShell) reply(r replyMsg) {
	p := l.call
	if p == nil || r.call != p.id || p.replies[r.i] != nil {
		return // a duplicate, or a call the leader moved on from
	}
	if r.err != nil {
		l.endCall(nil, r.err)
		return
	}
	p.replies[r.i] = r.body
	p.got++
	if p.got == len(p.replies) {
		if p.form {
			l.n.s.check.formed(l.n, p.gen)
		}
		l.endCall(p.replies, nil)
	}
}

func (l *leaderShell) endCall(replies []any, err error) {
	p := l.call
	l.call = nil
	l.n.lead.Replies(p.gen, p.phase, replies, err)
}

// lost: member i of the world failed; the call and step in flight stop
// waiting for it.
func (l *leaderShell) lost(i int, id string) {
	if p := l.call; p != nil && p.replies[i] == nil {
		l.endCall(nil, failure.Wrapf(failure.PeerLost, "member %s failed", id))
	}
	if lp := l.loop; lp != nil {
		for r, rid := range lp.ranks {
			if rid == id && !lp.done[r] {
				l.endLoop(failure.Wrapf(failure.PeerLost, "member %s (rank %d) failed", id, r))
				return
			}
		}
	}
}

func (l *leaderShell) tick() {
	now := l.n.s.clk.now
	if p := l.call; p != nil && now >= p.deadline {
		l.endCall(nil, failure.Wrapf(failure.Timeout, "generation %d, %v: %d of %d members answered within %s", p.gen, p.phase, p.got, len(p.replies), callTimeout))
	}
	if lp := l.loop; lp != nil && now >= lp.deadline {
		what := fmt.Sprintf("step %d: %d of %d ranks done", lp.step, lp.got, len(lp.ranks))
		if lp.saving {
			what = fmt.Sprintf("the checkpoint of step %d", lp.step)
		}
		l.endLoop(failure.Wrapf(failure.Timeout, "%s: not done within %s", what, stepTimeout))
	}
}

func (l *leaderShell) startLoop(o *leader.TrainOrder) {
	n := l.n
	lay := o.Layout
	cfg := n.s.cfg
	// The simulated members report no loss (the check compares their
	// weights with the fault-free run's instead), and there is no
	// held-out data.
	cad := cadence.New(cadence.Config{From: lay.Step, Steps: cfg.Steps, Window: 1, CkptEvery: cfg.CkptEvery, Save: cfg.CkptEvery > 0})
	lp := &stepLoop{gen: o.Gen, order: *o, cad: cad, step: lay.Step, cursor: uint64(lay.Cursor), ranks: make([]string, lay.Mesh.Size())}
	for r, i := range lay.Members {
		lp.ranks[r] = n.world.Members[i].ID
	}
	l.loop = lp
	n.s.tracef("%s trains generation %d from step %d on %d ranks", n.id, o.Gen, lay.Step, len(lp.ranks))
	l.nextStep()
}

// nextStep sends the step the cadence asks for to every rank, or ends
// the loop at the job's end.
func (l *leaderShell) nextStep() {
	lp, n := l.loop, l.n
	step, ok := lp.cad.Next()
	if !ok {
		l.endLoop(nil)
		return
	}
	lp.cad.Started()
	lp.step = step
	lp.done, lp.got = make([]bool, len(lp.ranks)), 0
	lp.deadline = n.s.clk.now + stepTimeout
	for _, id := range lp.ranks {
		n.s.send(n.id, id, runStep{gen: lp.gen, step: lp.step, cursor: lp.cursor, batch: lp.order.Batch})
	}
}

func (l *leaderShell) stepDone(d stepDone) {
	lp := l.loop
	if lp == nil || lp.saving || d.gen != lp.gen || d.step != lp.step || d.rank < 0 || d.rank >= len(lp.done) || lp.done[d.rank] {
		return
	}
	if d.err != nil {
		l.endLoop(fmt.Errorf("step %d, rank %d: %w", d.step, d.rank, d.err))
		return
	}
	lp.done[d.rank] = true
	lp.got++
	if lp.got < len(lp.ranks) {
		return
	}
	l.n.s.stepsRun++
	l.n.lead.Progress()
	a := lp.cad.Done(0, nil)
	lp.step = a.Step
	lp.cursor += uint64(lp.order.Batch)
	if a.Save {
		// Rank 0 saves (or every part's writer its shard); the loop waits
		// for it.
		if l.n.s.cfg.sharded() {
			l.saveShards()
			return
		}
		lp.saving = true
		lp.deadline = l.n.s.clk.now + stepTimeout
		l.n.s.send(l.n.id, lp.ranks[0], saveMsg{gen: lp.gen, step: lp.step})
		return
	}
	l.nextStep()
}

// saveShards begins the checkpoint of a model in parts: replica 0's rank
// of every part writes its shard into the save's temporary directory.
func (l *leaderShell) saveShards() {
	lp, s := l.loop, l.n.s
	tmp, err := checkpoint.BeginSave(s.fs, ckptDir, int64(lp.step))
	if errors.Is(err, checkpoint.ErrCommitted) {
		l.nextStep() // saved by an earlier generation
		return
	}
	if err != nil {
		l.endLoop(failure.Wrapf(failure.Output, "checkpoint of step %d: %v", lp.step, err))
		return
	}
	m := lp.order.Layout.Mesh
	zg := s.cfg.zeroGroup()
	lp.saving, lp.tmp, lp.fs, lp.shards, lp.wrote = true, tmp, s.fs, make([]savedMsg, m.Slots(zg)), 0
	lp.deadline = s.clk.now + stepTimeout
	for slot := range m.Slots(zg) {
		s.send(l.n.id, lp.ranks[m.SlotRank(slot, 0, zg)], saveMsg{gen: lp.gen, step: lp.step, tmp: tmp, fs: s.fs})
	}
}

// saved: rank 0 saved the checkpoint (or failed to).
func (l *leaderShell) saved(m savedMsg) {
	lp := l.loop
	if lp == nil || !lp.saving || m.gen != lp.gen || m.step != lp.step {
		return
	}
	if m.err != nil {
		l.endLoop(m.err)
		return
	}
	if lp.shards != nil {
		if m.written == nil || m.part < 0 || m.part >= len(lp.shards) || lp.shards[m.part].written != nil {
			return // a duplicate
		}
		lp.shards[m.part] = m
		if lp.wrote++; lp.wrote < len(lp.shards) {
			return
		}
		done, err := l.commitShards(lp)
		switch {
		case err != nil:
			l.endLoop(err)
			return
		case !done:
			return // the leader crashed in its commit
		}
		lp.shards = nil
	}
	lp.saving = false
	l.nextStep()
}

func (l *leaderShell) endLoop(err error) {
	lp := l.loop
	l.loop = nil
	l.n.lead.Trained(lp.gen, err)
}
