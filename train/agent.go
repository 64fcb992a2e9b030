package train

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/train/leader"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// RunAgent runs one node of an elastic job until the job reaches its last
// step, fails, or the node leaves.
//
// The node joins the cluster (Join), and every generation the membership
// commits is laid out by its leader (the member of lowest name): a
// replica or a pipeline stage for each member, the state of each stage
// taken from its most advanced surviving holder or from the latest
// checkpoint. A member lost mid-step aborts the step on every member (an
// optimizer step applies only after its gradient sums completed
// everywhere) and the next generation resumes from the survivors. A
// permanent failure (an output that cannot be written, a world too small
// for the job, diverged replicas, bad data, a stage lost for longer than
// LostStageTimeout) ends the job on every member: RunAgent returns an
// error naming the cause on each.
//
// Cancelling ctx makes the node leave at a step boundary (its step in
// flight finishes; the others go on without it at once), and RunAgent
// returns its summary with Left set. Options.OnStep and OnWorld are
// called on RunAgent's goroutine for every step and generation of the job
// while the node is a member; Options.StopAfter leaves after that step.
func RunAgent(ctx context.Context, ac AgentConfig, o Options) (*AgentSummary, error) {
	if err := ac.Validate(); err != nil {
		return nil, err
	}
	ac = ac.withDefaults()
	if err := ac.Train.probeOutputs(); err != nil {
		return nil, err
	}
	j, err := openValidJob(ac.Train, o.given())
	if err != nil {
		return nil, err
	}
	a := &agent{ac: ac, j: j, o: o, log: o.logger().With(zap.String("node", ac.Name)), notes: newMailbox(),
		callDone: make(chan callResult, 1), trainDone: make(chan trainResult, 1), quit: make(chan struct{})}
	if err := a.start(ctx); err != nil {
		a.close()
		return nil, err
	}
	sum, err := a.run(ctx)
	a.close()
	if sum != nil {
		sum.Name, sum.Member, sum.Led = ac.Name, a.node.Self().ID, a.led
	}
	return sum, err
}

// agent is one elastic node: its worker (an actor), its membership, and,
// while it leads a generation, the leader core's shell. The run loop owns
// everything but the worker, which its actor owns.
type agent struct {
	ac    AgentConfig
	j     *job
	o     Options
	log   *zap.Logger
	sys   *actors.System
	be    kernels.Backend
	shell *worker.Shell
	// scalers are the fp16 loss scaler's states after the last steps the
	// job reported (by step), for a generation this node leads to continue
	// from.
	scalers map[int]checkpoint.ScalerState
	// stopDumps ends the watch of Options.Dump.
	stopDumps func()
	gate      *nodeGate
	node      *elastic.Node
	notes     *mailbox
	prom      *promRun

	core *leader.Core
	gen  *generation // the generation this node leads (nil: none)
	led  int
	// pending is the line of a step that failed on some ranks but
	// completed on another replica: reported when the next generation
	// continues after it (see adoptedError), dropped when it replays it.
	pending *StepMetrics
	// current is the last world committed; formed the last generation the
	// leader said formed (Progress).
	current elastic.World
	formed  WorldInfo
	// servers are this node's parameter servers (Sync async, while it
	// leads), kept what they hold when a generation ended with every step
	// it began applied (nil: the next generation does not continue from
	// them).
	servers *groupExecutor
	kept    *leader.ServerState
	keptGen uint64 // the generation that ended with them
	ckpt    *checkpointer
	bar     *progress

	callDone  chan callResult
	trainDone chan trainResult
	quit      chan struct{} // closed when run returns: result senders give up
	wg        sync.WaitGroup
	closed    bool
}

// generation is what the leader of a generation holds: the group over its
// members, the context of its calls, and the contexts of its step loop: a
// soft one (stop before the next step) and a hard one (abort).
type generation struct {
	world elastic.World
	// group calls the members' workers, pids by member: the core's calls
	// (status, sync) first, then the step loop's through ex.
	group *actors.Group
	pids  []*actor.PID
	// ex drives the generation's mesh once the core planned it (train):
	// until then no one knows which member holds which rank, so it is nil.
	// It owns group from then on.
	ex        *groupExecutor
	ctx       context.Context
	cancel    context.CancelFunc
	soft      context.Context
	stopLoop  context.CancelFunc
	loopCtx   context.Context
	abortLoop context.CancelFunc
	// committed is when the world committed (resume_ms).
	committed time.Time
	// async is the generation's asynchronous executor (Sync async), once
	// its step loop made it.
	async atomic.Pointer[asyncExecutor]
	// proof is the world's commit proof, which the generation's first calls
	// (status, form) carry to its members.
	proof []byte
}

func newGeneration(w elastic.World, group *actors.Group, pids []*actor.PID) *generation {
	g := &generation{world: w, group: group, pids: pids, committed: time.Now()}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.soft, g.stopLoop = context.WithCancel(context.Background())
	g.loopCtx, g.abortLoop = context.WithCancel(context.Background())
	return g
}

type callResult struct {
	gen     uint64
	phase   leader.Phase
	replies []any
	err     error
}

type trainResult struct {
	gen uint64
	err error
}

// start opens the node's worker and joins the cluster.
func (a *agent) start(ctx context.Context) error {
	ac, cfg := &a.ac, &a.j.cfg
	host, _, _ := net.SplitHostPort(ac.Listen)
	id, err := ac.TLS.load()
	if err != nil {
		return err
	}
	var key []byte
	if ac.Key != "" {
		key, _ = elastic.ParseKey(ac.Key)
	}
	if a.sys, err = actors.NewSystem(actors.SystemConfig{Remote: true, Host: host, TLS: id, Logger: a.log}); err != nil {
		return err
	}
	if a.be, err = kernels.Open(cfg.Device, kernels.Options{Threads: cfg.Threads}); err != nil {
		return fieldErr("Train.Device", "%s: %v", cfg.Device, err)
	}
	spec := a.j.workerSpec()
	// A torn step (some parts or ZeRO shards updated, others not) can then
	// be undone.
	// A torn step is undone: one some parts of a replica applied (a
	// pipeline, tensor parallelism), some ZeRO shards, or some replicas
	// (a synchronisation round that ended on some of them).
	spec.KeepUndo = cfg.PP*cfg.TP > 1 || cfg.Zero > 0 || cfg.sync().Local()
	w, err := worker.New(spec, a.be, worker.WithLogger(a.log))
	if err != nil {
		return err
	}
	cc := commConfig(cfg, a.log)
	cc.DataPlane.Key, cc.DataPlane.TLS = key, id
	a.gate = &nodeGate{}
	// Worlds change at step boundaries, except under async: a replica's
	// computation involves no other member, so a world may change while
	// it runs (the leader's step loop finishes its steps in flight first).
	var gate worker.Gate = a.gate
	if a.async() {
		gate = nil
	}
	if a.shell, err = worker.Spawn(a.sys, w, worker.ShellConfig{Name: worker.ActorName, Node: ac.Name, Gate: gate, Logger: a.log,
		Notify: a.notes.put, Learn: a.learn,
		Comms: func(f *workerpb.Form) (collective.Communicator, error) {
			c := cc
			c.World = fmt.Sprintf("gen%d", f.Generation)
			return actors.StartRemote(a.sys, actors.RemoteWorld{Rank: int(f.Rank), Addrs: f.Addrs}, c)
		}}); err != nil {
		return err
	}
	if a.ckpt, err = newCheckpointer(cfg, a.log); err != nil {
		return err
	}
	flights := &flightSource{}
	flights.set(shellFlights(a.shell))
	if a.prom, err = openProm(cfg, a.o, prometheus.Labels{"node": ac.Name}, flights, a.log); err != nil {
		return err
	}
	a.stopDumps = flights.watch(a.o.Dump, cfg.DumpDir, a.log)
	a.ckpt.setObserver(a.prom.m())
	quorum := ac.Quorum
	timings, _ := elastic.ParseTimings(ac.Timings)
	a.core = leader.New(leader.Config{PP: cfg.PP, TP: cfg.TP, ZeroGroup: a.j.zeroGroup(cfg.DP), ZeroShards: a.j.zeroShards(), MicroBatches: cfg.microBatches(), Batch: cfg.Batch, LinearLR: ac.Rescale == LinearLR, Rounds: cfg.sync().Local(), Async: a.async(),
		Resume: cfg.Resume, ResumeRequired: cfg.ResumeRequired, Target: a.j.steps, LostStageTimeout: ac.LostStageTimeout, RetryDelay: 3 * time.Second,
		MaxRestarts: ac.MaxRestarts, RdzvTimeout: ac.RdzvTimeout}, time.Now())
	if a.o.Progress != nil {
		a.bar = newProgress(a.o.Progress, a.j.steps)
	}
	a.node, err = elastic.Start(ctx, elastic.Config{
		Name: ac.Name, BindAddr: ac.Listen, Join: ac.Join, JoinTimeout: ac.JoinTimeout, MinNodes: ac.MinNodes, MaxNodes: ac.MaxNodes,
		Quorum: quorum, Key: key, Timings: timings, Devices: []string{a.be.Caps().Device},
	}, a.sys, append([]elastic.Option{elastic.WithLogger(a.log)}, a.o.membership...)...)
	if err != nil {
		return err
	}
	a.gate.node.Store(a.node)
	return nil
}

// close stops everything the agent started, in order.
func (a *agent) close() {
	if a.closed {
		return
	}
	a.closed = true
	a.stopLeading()
	close(a.quit)
	a.wg.Wait()
	a.dropServers()
	if a.stopDumps != nil {
		a.stopDumps()
	}
	if a.bar != nil {
		a.bar.finish()
	}
	if a.shell != nil {
		a.shell.Stop()
	}
	if a.node != nil {
		if err := a.node.Close(); err != nil && !errors.Is(err, context.Canceled) {
			a.log.Warn("closing the membership", zap.Error(err))
		}
	}
	if a.ckpt != nil {
		a.ckpt.close()
	}
	a.prom.close()
	if a.sys != nil {
		a.sys.Close()
	}
}

// run is the node's loop: membership events abort the step in flight,
// committed worlds go to the leader core, the core's calls and step loop
// run beside it, and the worker's notes (progress, the job's end, a
// crash) come back to it. It returns when the job ends or the node leaves.
func (a *agent) run(ctx context.Context) (*AgentSummary, error) {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var finish *workerpb.Finish
	for {
		select {
		case <-ctx.Done():
			return a.leave("stopped")
		case <-a.node.Failed():
			if ended, err := a.core.Ended(); ended && err == nil {
				// This node led the job to its target and is telling every
				// member: they exit as they hear it, and an answer sent as
				// a member exits may be lost, so the others' going is the
				// end's consequence, not this node's failure.
				a.log.Info("the other nodes left after the job's end", zap.NamedError("membership", a.node.Err()))
				return a.finished(&workerpb.Finish{Step: uint64(a.j.steps)})
			}
			return nil, a.node.Err()
		case <-a.notes.ready():
			for _, n := range a.notes.take() {
				switch m := n.(type) {
				case *workerpb.Progress:
					if stop := a.progress(m); stop {
						return a.leave(fmt.Sprintf("left after step %d (StopAfter)", a.o.StopAfter))
					}
				case *workerpb.Finish:
					finish = m
				case error:
					return nil, fmt.Errorf("train: this node's worker failed: %w", m)
				}
			}
			if finish != nil && a.gen == nil {
				return a.finished(finish)
			}
		case ev, ok := <-a.node.Events():
			if !ok {
				return nil, fmt.Errorf("train: the membership closed: %w", elastic.ErrClosed)
			}
			a.onEvent(ev)
		case w, ok := <-a.node.Worlds():
			if !ok {
				return nil, fmt.Errorf("train: the membership closed: %w", elastic.ErrClosed)
			}
			if !a.async() {
				a.shell.Abort(fmt.Sprintf("generation %d committed", w.Gen))
			}
			a.commit(w)
		case r := <-a.callDone:
			a.core.Replies(r.gen, r.phase, r.replies, r.err)
		case r := <-a.trainDone:
			a.keepPending(r.err)
			a.core.Trained(r.gen, r.err)
		case now := <-ticker.C:
			a.core.Tick(now)
		}
		if done, err := a.apply(); done {
			// This node led the job's end: the core's word is the job's
			// (its own worker's Finish note may not be read yet). The
			// steps its worker was told of before it are (they were
			// queued before it answered the Finish).
			for _, n := range a.notes.take() {
				if m, ok := n.(*workerpb.Progress); ok {
					a.progress(m)
				}
			}
			return a.finished(&workerpb.Finish{Step: uint64(a.j.steps), Failure: workerpb.FailureOf(err)})
		}
	}
}

// onEvent aborts the step in flight on the first signal that it cannot
// complete: a member of this world lost, or a new world proposed.
func (a *agent) onEvent(ev elastic.Event) {
	switch ev.Kind {
	case elastic.EventFailed, elastic.EventLeft:
		// (Under async a replica's computation waits for no member.)
		if a.current.Rank(ev.Member.ID) >= 0 && !a.async() {
			a.shell.Abort(fmt.Sprintf("%s %s", ev.Kind, ev.Member.Name))
		}
		if g := a.gen; g != nil && ev.Kind == elastic.EventFailed {
			// A failed member (dead, or hung: no reset comes) answers
			// nothing more: the generation's calls stop waiting for it,
			// and under async its batch goes to another replica.
			// A member that left answers until it is gone.
			if i := g.world.Rank(ev.Member.ID); i >= 0 {
				g.group.Lost(i, "member "+ev.Member.Name+" failed")
				if e := g.async.Load(); e != nil {
					e.loseMember(i, "member "+ev.Member.Name+" failed")
				}
			}
		}
		a.log.Warn("member lost", zap.String("member", ev.Member.Name), zap.Stringer("kind", ev.Kind), zap.Duration("detection", ev.Silence))
	case elastic.EventProposed:
		// A new world is being agreed: the step in flight is abandoned on
		// every rank (a rank whose Hold failed would leave the others
		// waiting in it) and retried in the new generation.
		if ev.World.Rank(a.node.Self().ID) >= 0 && !a.async() {
			a.shell.Abort(fmt.Sprintf("generation %d proposed", ev.World.Gen))
		}
	case elastic.EventWaiting:
		// Kept out of any world: the rendezvous timeout runs (a standby
		// node or one that leaves waits by design).
		if strings.HasPrefix(ev.Reason, "too few nodes") || strings.HasPrefix(ev.Reason, "no quorum") {
			a.core.Waiting(ev.Reason)
		}
	case elastic.EventCommitted:
		a.log.Info("transition", zap.Uint64("generation", ev.World.Gen), zap.Strings("members", memberNames(ev.World)),
			zap.String("reason", ev.World.Reason), zap.Duration("rendezvous", ev.Rendezvous))
	}
}

// commit hands world w to the core; on its leader a group over its
// members serves the generation's calls.
func (a *agent) commit(w elastic.World) {
	a.stopLeading()
	a.current = w
	lead := w.Rank(a.node.Self().ID) == 0
	if a.async() {
		// The parameter servers go on here while this node leads; under
		// another leader they start again from the latest checkpoint.
		// Kept only from the generation just before: after one this node
		// did not see, another leader may have trained past them.
		if !lead || a.kept == nil || w.Gen != a.keptGen+1 {
			a.dropServers()
		}
		a.core.KeepServers(a.kept)
	}
	if lead {
		a.led++
		pids := make([]*actor.PID, w.Size())
		for i, m := range w.Members {
			pids[i] = actor.NewPID(m.ActorAddr, worker.ActorName)
		}
		group, err := workerGroup(a.sys, fmt.Sprintf("lead-gen%d", w.Gen), pids, memberName(w), &a.j.cfg)
		if err != nil {
			a.log.Error("leading a generation", zap.Uint64("generation", w.Gen), zap.Error(err))
			lead = false
		} else {
			a.gen = newGeneration(w, group, pids)
			if a.gen.proof, err = a.node.CommitProof(w); err != nil {
				a.log.Warn("sealing the commit proof", zap.Uint64("generation", w.Gen), zap.Error(err))
			}
		}
	}
	a.core.Commit(w, lead, a.latestCheckpoint())
}

// stopLeading ends the generation this node leads and waits for its call
// and step loop to return. A call is cancelled at once; the step loop
// stops after the step in flight, so that a step every worker completed
// is reported: the workers abort a step that cannot complete on the same
// signals that superseded the generation, so the wait is short, and
// bounded by the collective timeout (a silent peer's bound).
func (a *agent) stopLeading() {
	if a.gen == nil {
		return
	}
	a.gen.cancel()
	a.gen.stopLoop()
	abort := time.AfterFunc(a.j.cfg.CollectiveTimeout, a.gen.abortLoop)
	defer abort.Stop()
	defer a.gen.abortLoop()
	// Wait for its goroutines. What they report is for a generation the
	// core has left, but a step the loop could not report is kept.
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-a.callDone:
		case r := <-a.trainDone:
			a.keepPending(r.err)
		case ev, ok := <-a.node.Events():
			// A member that failed must not hold the wait: its calls
			// stop waiting for it (onEvent).
			if ok {
				a.onEvent(ev)
			}
		}
	}
	if a.gen.ex != nil {
		a.gen.ex.Close()
	} else {
		a.gen.group.Close()
	}
	a.gen = nil
}

// memberName names the members of world w by group peer.
func memberName(w elastic.World) func(int) string {
	names := memberNames(w)
	return func(p int) string { return "member " + names[p] }
}

// leaderExecutor drives generation g's mesh as layout l places it on the
// members: built only once the core planned the layout (a member's rank
// depends on what it holds, which the generation's first calls ask). Every
// rank writes its shard of a checkpoint, and a failed step may count for
// the next generation (elasticSalvage).
func (a *agent) leaderExecutor(g *generation, l leader.Layout) *groupExecutor {
	w := execWorld{mesh: l.Mesh, gen: g.world.Gen, peers: l.Members, pids: g.pids, peerName: memberName(g.world)}
	return newGroupExecutor(a.sys, g.group, w, execSetup{saver: sharding(a.ckpt), salvager: elasticSalvage{},
		parts: a.j.partsLayout(), zeroShards: a.j.zeroShards()}, &a.j.cfg, a.log)
}

// latestCheckpoint is what the leader core needs of the latest checkpoint.
func (a *agent) latestCheckpoint() leader.Checkpoint {
	if a.j.cfg.CkptDir == "" {
		return leader.Checkpoint{Err: fmt.Errorf("%w: the job has no checkpoint directory", checkpoint.ErrNoCheckpoint)}
	}
	ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, a.j.cfg.CkptDir)
	if err != nil {
		return leader.Checkpoint{Err: err}
	}
	defer ck.Close()
	m := ck.Manifest
	if m.Sampler == nil {
		return leader.Checkpoint{Err: fmt.Errorf("%w: checkpoint step %d has no sampler state", checkpoint.ErrManifest, m.Step)}
	}
	return leader.Checkpoint{Step: int(m.Step), Cursor: m.Sampler.Cursor}
}

// apply does what the core asked. It reports done when the job ended on
// every member, with the error that ended it.
func (a *agent) apply() (bool, error) {
	for _, o := range a.core.Ready() {
		switch {
		case o.Call != nil:
			a.call(o.Call)
		case o.Train != nil:
			a.train(o.Train)
		case o.Stop != 0:
			// commit stopped the generation's loop before the core saw
			// the new world; this is for a generation still current.
			if a.gen != nil && a.gen.world.Gen == o.Stop {
				a.stopLeading()
			}
		case o.Request != "":
			a.node.Request(o.Request)
		case o.Wait != "":
			a.log.Warn("waiting for the next generation", zap.String("reason", o.Wait))
		case o.Done:
			if o.Err != nil {
				a.log.Error("the job cannot go on", zap.Error(o.Err))
			} else {
				a.log.Info("job finished", zap.Int("step", a.j.steps))
			}
			return true, o.Err
		}
	}
	return false, nil
}

func memberNames(w elastic.World) []string {
	out := make([]string, len(w.Members))
	for i, m := range w.Members {
		out[i] = m.Name
	}
	return out
}
