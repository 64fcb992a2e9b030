package train

import (
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/train/leader"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// call runs one of the core's calls beside the loop.
func (a *agent) call(c *leader.Call) {
	g := a.gen
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		var replies []any
		var err error
		if c.Phase == leader.PhaseFinish {
			// Told to every member that can hear it: a member lost in the
			// last generation (asynchronous training completes without
			// it) must not keep the others from hearing the job ended.
			replies = a.tellEach(g, c.Msgs)
			a.tellStandbys(g, c.Msgs)
		} else {
			proveCommit(c.Msgs, g.proof)
			replies, err = g.group.Call(g.ctx, c.Msgs)
		}
		select {
		case a.callDone <- callResult{gen: c.Gen, phase: c.Phase, replies: replies, err: err}:
		case <-a.quit:
		}
	}()
}

// proveCommit attaches a generation's commit proof to the calls that open
// it: a member that missed the commit (its proposer died before it reached
// it) would refuse the generation's steps, waiting for a commit that never
// comes; the call itself proves it.
func proveCommit(msgs []any, proof []byte) {
	for _, m := range msgs {
		switch m := m.(type) {
		case *workerpb.StatusRequest:
			m.CommitProof = proof
		case *workerpb.Form:
			m.CommitProof = proof
		}
	}
}

// learn takes the commit proof of a leader's call (on the worker actor's
// goroutine, before the call is served): learnTimeout bounds the wait for
// the membership actor, which answers between two rendezvous messages.
func (a *agent) learn(proof []byte) {
	n := a.gate.node.Load()
	if n == nil {
		return
	}
	before := n.World().Gen
	if err := n.Learn(proof, learnTimeout); err != nil {
		a.log.Warn("a leader's call does not prove its generation", zap.Error(err))
	} else if w := n.World(); w.Gen > before {
		a.log.Info("learned a generation's commit from its leader's call", zap.Uint64("generation", w.Gen))
	}
}

// learnTimeout bounds Learn's wait for the membership actor.
const learnTimeout = 2 * time.Second

// tellEach sends msgs[i] to member i of generation g, each on its own,
// and returns the answers (nil where a member did not answer within the
// collective timeout: a live worker answers at once, between its steps,
// and a silent one must not hold the end for the step timeout).
func (a *agent) tellEach(g *generation, msgs []any) []any {
	replies := make([]any, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		if m == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := a.sys.Root().RequestFuture(g.pids[i], m, a.j.cfg.CollectiveTimeout).Result(); err == nil {
				replies[i] = r
			}
		}()
	}
	wg.Wait()
	return replies
}

// tellStandbyTimeout bounds how long the leader waits for a standby's
// answer to the job's end. The message is on its way at once; the answer
// only confirms it, and a standby that got it ends and may close its
// actor system before its answer leaves (the leader then waited the whole
// collective timeout, 30 s, at the end of every job with a standby).
const tellStandbyTimeout = 2 * time.Second

// tellStandbys tells the live nodes outside generation g (standby beyond
// MaxNodes) that the job ended, with the members' Finish: they would
// otherwise wait for a world for ever. Best effort, each bounded by the
// collective timeout.
func (a *agent) tellStandbys(g *generation, msgs []any) {
	var fin *workerpb.Finish
	for _, m := range msgs {
		if f, ok := m.(*workerpb.Finish); ok {
			fin = f
			break
		}
	}
	if fin == nil {
		return
	}
	var wg sync.WaitGroup
	for _, m := range a.node.Members() {
		if g.world.Rank(m.ID) >= 0 || m.ID == a.node.Self().ID || m.ActorAddr == "" {
			continue
		}
		f := proto.Clone(fin).(*workerpb.Finish)
		f.Peer = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := actor.NewPID(m.ActorAddr, worker.ActorName)
			if _, err := a.sys.Root().RequestFuture(pid, f, min(a.j.cfg.CollectiveTimeout, tellStandbyTimeout)).Result(); err != nil {
				a.log.Debug("telling a standby the job ended", zap.String("node", m.Name), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

// train runs the generation's step loop beside the loop: the trainer
// drives the members' workers, appends the steps to this node's metrics
// file and tells every member of each step.
func (a *agent) train(o *leader.TrainOrder) {
	g := a.gen
	l := o.Layout
	g.ex = a.leaderExecutor(g, l)
	a.log.Info("generation formed", zap.Uint64("generation", o.Gen), zap.Strings("members", o.Members),
		zap.String("reason", g.world.Reason), zap.Stringer("world", l.Mesh), zap.Strings("standby", o.Standby),
		zap.Int("step", l.Step), zap.String("state_from", o.StateFrom), zap.Duration("sync", time.Since(g.committed)))
	a.broadcast(g, &workerpb.Progress{Report: &workerpb.Progress_World{World: worldInfoMsg(worldInfo(o))}})
	t := newTrainer(a.j, a.log, a.ckpt)
	a.continueScaler(t, l)
	pending := a.pending
	if pending != nil && pending.Step != l.Step {
		pending = nil // the generation replays that step: it did not count
	}
	a.pending = nil
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if h := a.o.beforeLead; h != nil {
			h(func() int { return len(a.node.Members()) })
		}
		err := a.lead(g, t, o, pending)
		select {
		case a.trainDone <- trainResult{gen: o.Gen, err: err}:
		case <-a.quit:
		}
	}()
}

// worldInfo describes the generation o trains (Options.OnWorld).
func worldInfo(o *leader.TrainOrder) WorldInfo {
	l := o.Layout
	return WorldInfo{Generation: o.Gen, Mesh: l.Mesh.String(), DP: l.Mesh.DP, PP: l.Mesh.PP, Members: o.Members, Standby: o.Standby,
		Step: l.Step, StateFrom: o.StateFrom}
}

// continueScaler gives t the loss scaler's state after the step layout l
// continues from: the one the job reported for that step, or else the one
// a worker that ran it ran with, updated by its outcome (this node's, or
// the one whose training state the generation takes: the scaler's state
// travels with the training state), or the checkpoint's the state comes
// from; without any the scaler starts again from its initial scale, and
// says so.
func (a *agent) continueScaler(t *trainer, l leader.Layout) {
	if t.scaler == nil || l.Step == 0 {
		return
	}
	if l.Source.Kind != worker.FromCheckpoint {
		var last lastRun
		if _, ok := a.scalers[l.Step]; !ok {
			last = a.lastRunAt(l)
		}
		if st, ok := t.scaler.at(l.Step, a.scalers, last); ok {
			t.scaler.restore(&st)
			return
		}
	}
	if l.Source.Kind == worker.FromCheckpoint {
		if ck, err := checkpoint.Open(checkpoint.OSFS{}, a.j.cfg.CkptDir, int64(l.Source.Step)); err == nil {
			t.scaler.restore(ck.Manifest.LossScaler)
			ck.Close()
			return
		}
	}
	a.log.Warn("the loss scaler's state after this step is unknown here: it starts again from its initial scale", zap.Int("step", l.Step), zap.Float64("scale", t.scaler.Scale))
}

// lastRunAt is what a worker that ran the last step before layout l's says
// of it: this node's, or else that of the member whose state the
// generation takes (the first part's root).
func (a *agent) lastRunAt(l leader.Layout) lastRun {
	of := func(st *workerpb.Status) lastRun {
		return lastRun{Step: int(st.LastStep), Applied: int(st.Applied), LossScale: st.LastLossScale,
			Tracker: int(st.LastLossScaleTracker), Skipped: st.LastSkipped}
	}
	if st, err := a.ownStatus(); err == nil && int(st.LastStep) == l.Step-1 && int(st.Applied) == l.Step {
		return of(st)
	}
	if i := sourceMember(l); i >= 0 && a.gen != nil && i < len(a.gen.pids) {
		res, err := a.sys.Root().RequestFuture(a.gen.pids[i], &workerpb.StatusRequest{}, salvageTimeout).Result()
		if st, ok := res.(*workerpb.Status); err == nil && ok && st.Failed() == nil {
			return of(st)
		}
	}
	return lastRun{}
}

// sourceMember is the member whose worker's state layout l's first model
// part takes from (−1: none, the state comes from elsewhere).
func sourceMember(l leader.Layout) int {
	if l.Source.Kind != worker.FromReplica || len(l.Source.Roots) == 0 {
		return -1
	}
	return slices.Index(l.Rank, l.Source.Roots[0])
}

// lead runs generation g's step loop to the job's last step and saves the
// weights; pending, when set, is a step the previous generation trained
// but could not report, which this one continues after.
func (a *agent) lead(g *generation, t *trainer, o *leader.TrainOrder, pending *StepMetrics) error {
	var mw *metricsWriter
	if path := a.j.cfg.MetricsOut; path != "" {
		var err error
		if mw, err = appendMetricsWriter(path); err != nil {
			return err
		}
		defer mw.close()
	}
	t.observe = func(m StepMetrics) error {
		if mw != nil {
			if err := mw.write(m); err != nil {
				return err
			}
		}
		a.broadcast(g, &workerpb.Progress{Report: &workerpb.Progress_Metrics{Metrics: stepMetricsMsg(m)}, Step: uint64(m.Step)})
		return nil
	}
	if pending != nil {
		if err := t.observe(*pending); err != nil {
			return err
		}
	}
	l := o.Layout
	var ex executor = g.ex
	if a.async() {
		e, err := a.asyncGeneration(g, o)
		if err != nil {
			return err
		}
		defer a.settleAsync(e, o)
		ex = e
	}
	if _, err := t.run(g.loopCtx, segment{ex: ex, from: l.Step, cursor: l.Cursor, batch: o.Batch, lrScale: o.LRScale,
		committed: g.committed, stop: g.soft}); err != nil {
		return err
	}
	if a.j.cfg.Save != "" {
		return t.saveWeights(g.loopCtx, ex, a.j.steps)
	}
	return nil
}

// broadcast tells every member of generation g.
func (a *agent) broadcast(g *generation, m *workerpb.Progress) {
	m.From = a.ac.Name
	for _, pid := range g.pids {
		a.sys.Root().Send(pid, m)
	}
}

// progress takes what the leader said: a generation formed, or a step
// trained. It reports whether the node should now leave (StopAfter).
func (a *agent) progress(p *workerpb.Progress) bool {
	w, m, err := progressOf(p)
	if err != nil {
		// A report that does not decode is the leader's bug or another
		// build's (elastic.ProtocolVersion keeps those out): this member
		// misses one report, and the job goes on.
		a.log.Error("the leader's report does not decode: dropped", zap.String("from", p.GetFrom()),
			zap.Uint64("step", p.GetStep()), zap.Error(err))
		a.prom.m().observeDropped("progress")
		return false
	}
	if w != nil {
		a.formed = *w
		a.prom.m().observeWorld(*w)
		a.prom.setReady(slices.Contains(w.Members, a.ac.Name))
		if a.o.OnWorld != nil {
			a.o.OnWorld(*w)
		}
		return false
	}
	if m.Scaler != nil {
		if a.scalers == nil {
			a.scalers = map[int]checkpoint.ScalerState{}
		}
		a.scalers[m.Step] = *m.Scaler
		delete(a.scalers, m.Step-8)
	}
	a.prom.m().observeStep(*m)
	a.core.Progress()
	if a.o.OnStep != nil {
		a.o.OnStep(*m)
	}
	if a.bar != nil {
		a.bar.update(m.Step, m.Loss, m.SamplesPerS, m.TokensPerS)
	}
	return a.o.StopAfter > 0 && m.Step >= a.o.StopAfter
}
