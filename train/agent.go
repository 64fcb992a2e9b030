package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/internal/pki"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// Rescale is what an elastic world of another size keeps.
type Rescale string

const (
	// KeepGlobalBatch keeps the global batch; each replica's share changes.
	KeepGlobalBatch Rescale = "keep-global-batch"
	// LinearLR keeps each replica's batch: the global batch and the
	// learning rate scale with the world (the linear scaling rule).
	LinearLR Rescale = "linear-lr"
)

// AgentConfig is one node of an elastic job (troupe agent): one OS process
// with one worker, which holds a data-parallel replica, a pipeline stage
// (Train.PP > 1), or waits on standby. Validate says what cannot work and
// changes nothing.
type AgentConfig struct {
	// Train is the training run every node of the job shares; DP and
	// Procs do not apply (the world is the job's members).
	Train Config
	// Name is the stable node name (unique in the job).
	Name string
	// Listen is the gossip address host:port; the node's actor system and
	// data plane listen on the same host, on free ports.
	Listen string
	// Join lists gossip addresses of other nodes.
	Join []string
	// MinNodes: no world with fewer members forms (default 1); MaxNodes:
	// more members wait as standby (0: no limit).
	MinNodes, MaxNodes int
	// Quorum is whose agreement a new generation needs (default: a
	// majority of the previous one).
	Quorum elastic.Quorum
	// Key is the cluster key (see elastic.ParseKey); empty: gossip is not
	// encrypted.
	Key string
	// TLS, when its files are given, runs every channel between nodes over
	// mutually authenticated TLS 1.3 with certificates of one cluster CA
	// (troupe certs makes them): the actors' gRPC, the gossip streams and
	// the data plane. A node whose certificate the CA did not sign cannot
	// join, and its connections are refused and logged. Empty: plaintext,
	// with the cluster Key encrypting gossip and authenticating the data
	// plane.
	TLS TLSFiles
	// Timings is the failure detector preset, named for its network:
	// "loopback" (default; "fast" is its earlier name), "lan" or "wan"
	// (see elastic.ParseTimings).
	Timings string
	// JoinTimeout bounds the wait for an answer from the Join list
	// (default 30 s).
	JoinTimeout time.Duration
	// LostStageTimeout bounds the wait for a pipeline stage that no member
	// holds and no checkpoint can restore: a holder may still come back (a
	// hung or partitioned node keeps its state), but after this long every
	// agent exits with ErrStageLost. Default one minute.
	LostStageTimeout time.Duration
	// RdzvTimeout: a node that the membership keeps out of any world (too
	// few nodes, no quorum) for this long exits with ErrRendezvousTimeout
	// (torchrun's --rdzv-timeout). Default 15 minutes.
	RdzvTimeout time.Duration
	// MaxRestarts bounds the generations the leader starts after transient
	// failures (torchrun's --max-restarts); the next failure ends the job
	// with ErrRestarts. 0: no bound. Between restarts the leader waits 3 s,
	// doubled after each failure in a row up to 48 s.
	MaxRestarts int
	// Rescale is what a world of another size keeps (default
	// KeepGlobalBatch).
	Rescale Rescale
}

// TLSFiles are a node's PEM files: the cluster CA's certificate, the
// node's certificate and its private key. All three or none.
type TLSFiles struct {
	CA, Cert, Key string
}

// On reports whether TLS is asked for.
func (f TLSFiles) On() bool { return f != TLSFiles{} }

// load reads the identity; nil when TLS is off.
func (f TLSFiles) load() (*pki.Identity, error) {
	if !f.On() {
		return nil, nil
	}
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, fieldErr("TLS", "needs the CA, the certificate and the key (--tls-ca, --tls-cert, --tls-key); got CA %q, certificate %q, key %q", f.CA, f.Cert, f.Key)
	}
	id, err := pki.Load(f.CA, f.Cert, f.Key)
	if err != nil {
		return nil, fieldErr("TLS", "%v", err)
	}
	return id, nil
}

func (c AgentConfig) withDefaults() AgentConfig {
	c.Train = c.Train.withDefaults()
	if c.Rescale == "" {
		c.Rescale = KeepGlobalBatch
	}
	if c.LostStageTimeout == 0 {
		c.LostStageTimeout = time.Minute
	}
	if c.RdzvTimeout == 0 {
		c.RdzvTimeout = 15 * time.Minute
	}
	if c.Timings == "" {
		c.Timings = "loopback"
	}
	if c.MinNodes == 0 {
		c.MinNodes = 1
	}
	return c
}

// Validate reports the first setting that cannot work, as a *FieldError
// (Train's fields as Train.Field); it changes nothing.
func (c AgentConfig) Validate() error {
	t := c.Train
	if t.DP == 1 && t.ZeroGroup > 1 {
		t.DP = t.ZeroGroup // the world is the members; the checks see one shard group
	}
	if err := t.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return &FieldError{Field: "Train." + fe.Field, Msg: fieldRef.ReplaceAllString(fe.Msg, "{Train.$1}")}
		}
		return err
	}
	r := c.withDefaults()
	switch t := &r.Train; {
	case t.Zero > 0 && t.ZeroGroup < 2:
		return fieldErr("Train.ZeroGroup", "is needed with {Train.Zero} on agents (2 or more): the shard group keeps its size as members come and go, and the world is a multiple of it; members beyond that wait on standby")
	case t.DP != 1 || t.Procs != 0:
		return fieldErr("Train.DP", "and {Train.Procs} do not apply: an agent runs one worker, the job's members make the world")
	case t.sync().Async() && t.CkptDir == "":
		return fieldErr("Train.CkptDir", "is needed with {Train.Sync} async on agents: the parameter servers live on the leader's node, and a new leader continues from their latest checkpoint")
	case t.sync().Async() && r.Rescale != KeepGlobalBatch:
		return fieldErr("Rescale", "%s does not apply with {Train.Sync} async: every step is one whole batch on one replica, whatever the world", r.Rescale)
	case t.Transport == actors.TransportShm:
		return fieldErr("Train.Transport", "shm needs every rank on one host; agents span hosts: use tcp")
	case t.Trace != "":
		return fieldErr("Train.Trace", "records the pipeline of one troupe train run; agents have no process that sees every stage")
	case t.PP > 1 && t.Partition == ByTime:
		return fieldErr("Train.Partition", "time would cut differently on each node: agents cut by params or {Train.StageLayers}")
	case r.Name == "" || r.Listen == "":
		return fieldErr("Name", "and {Listen} are needed")
	case r.LostStageTimeout < 0:
		return fieldErr("LostStageTimeout", "%s is negative", r.LostStageTimeout)
	case r.RdzvTimeout < 0:
		return fieldErr("RdzvTimeout", "%s is negative", r.RdzvTimeout)
	case r.MaxRestarts < 0:
		return fieldErr("MaxRestarts", "%d is negative (0: no bound)", r.MaxRestarts)
	case r.Rescale != KeepGlobalBatch && r.Rescale != LinearLR:
		return fieldErr("Rescale", "%q: want keep-global-batch or linear-lr", r.Rescale)
	case r.MinNodes < 1 || r.MaxNodes < 0 || r.MaxNodes > 0 && r.MaxNodes < r.MinNodes:
		return fieldErr("MinNodes", "%d and {MaxNodes} %d: want 1 ≤ MinNodes ≤ MaxNodes (0: no limit)", r.MinNodes, r.MaxNodes)
	}
	if _, _, err := net.SplitHostPort(r.Listen); err != nil {
		return fieldErr("Listen", "%q: %v", r.Listen, err)
	}
	if _, err := elastic.ParseTimings(r.Timings); err != nil {
		return fieldErr("Timings", "%v", err)
	}
	if r.Key != "" {
		if _, err := elastic.ParseKey(r.Key); err != nil {
			return fieldErr("Key", "%v", err)
		}
	}
	if _, err := r.TLS.load(); err != nil {
		return err
	}
	return nil
}

// AgentSummary is what an agent reports when the job ends (troupe agent
// prints it as JSON).
type AgentSummary struct {
	Name   string `json:"name"`
	Member string `json:"member"`
	Step   int    `json:"step"`
	// Stage is the pipeline stage the agent held at the end (0 without
	// pipelining, -1 on standby) and Shard its tensor-parallel shard of
	// it: checksums compare within a (stage, shard).
	Stage int `json:"stage"`
	Shard int `json:"shard,omitempty"`
	// ZeroShard is, with ZeRO-3, the agent's shard of the stage's weights
	// in its shard group: checksums then compare within a (stage, shard,
	// zero_shard).
	ZeroShard  int    `json:"zero_shard,omitempty"`
	Generation uint64 `json:"generation"`
	Checksum   string `json:"checksum"`
	// Led counts the generations this agent led.
	Led int `json:"generations_led"`
	// Left is true when the agent left the job before its end.
	Left bool `json:"left"`
	// Error is why the job could not go on, when it ended that way.
	Error string `json:"error,omitempty"`
}

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

	core *LeaderCore
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
	kept    *ServerState
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
	world     elastic.World
	ex        *groupExecutor
	pids      []*actor.PID
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

func newGeneration(w elastic.World, ex *groupExecutor, pids []*actor.PID) *generation {
	g := &generation{world: w, ex: ex, pids: pids, committed: time.Now()}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.soft, g.stopLoop = context.WithCancel(context.Background())
	g.loopCtx, g.abortLoop = context.WithCancel(context.Background())
	return g
}

type callResult struct {
	gen     uint64
	phase   LeaderPhase
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
	a.core = NewLeaderCore(LeaderConfig{Stages: cfg.PP, Shards: cfg.TP, ZeroGroup: a.j.zeroGroup(cfg.DP), ZeroShards: a.j.zeroShards(), MicroBatches: cfg.microBatches(), Batch: cfg.Batch, LinearLR: ac.Rescale == LinearLR, Rounds: cfg.sync().Local(), Async: a.async(),
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
				g.ex.group.Lost(i, "member "+ev.Member.Name+" failed")
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
		names := memberNames(w)
		ex, err := newGroupExecutor(a.sys, fmt.Sprintf("lead-gen%d", w.Gen), pids, func(p int) string { return "member " + names[p] }, mesh.Mesh{}, w.Gen, nil, &a.j.cfg, a.log)
		if err != nil {
			a.log.Error("leading a generation", zap.Uint64("generation", w.Gen), zap.Error(err))
			lead = false
		} else {
			ex.ckpt, ex.parts, ex.zeroShards, ex.adopt = a.ckpt, a.j.partsLayout(), a.j.zeroShards(), true
			ex.learnControls(pids)
			a.gen = newGeneration(w, ex, pids)
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
	a.gen.ex.Close()
	a.gen = nil
}

// latestCheckpoint is what the leader core needs of the latest checkpoint.
func (a *agent) latestCheckpoint() CheckpointInfo {
	if a.j.cfg.CkptDir == "" {
		return CheckpointInfo{Err: fmt.Errorf("%w: the job has no checkpoint directory", checkpoint.ErrNoCheckpoint)}
	}
	ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, a.j.cfg.CkptDir)
	if err != nil {
		return CheckpointInfo{Err: err}
	}
	defer ck.Close()
	m := ck.Manifest
	if m.Sampler == nil {
		return CheckpointInfo{Err: fmt.Errorf("%w: checkpoint step %d has no sampler state", checkpoint.ErrManifest, m.Step)}
	}
	return CheckpointInfo{Step: int(m.Step), Cursor: m.Sampler.Cursor}
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

// call runs one of the core's calls beside the loop.
func (a *agent) call(c *LeaderCall) {
	g := a.gen
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		var replies []any
		var err error
		if c.Phase == phaseFinish {
			// Told to every member that can hear it: a member lost in the
			// last generation (asynchronous training completes without
			// it) must not keep the others from hearing the job ended.
			replies = a.tellEach(g, c.Msgs)
			a.tellStandbys(g, c.Msgs)
		} else {
			proveCommit(c.Msgs, g.proof)
			replies, err = g.ex.group.Call(g.ctx, c.Msgs)
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
			if _, err := a.sys.Root().RequestFuture(pid, f, a.j.cfg.CollectiveTimeout).Result(); err != nil {
				a.log.Debug("telling a standby the job ended", zap.String("node", m.Name), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

// train runs the generation's step loop beside the loop: the trainer
// drives the members' workers, appends the steps to this node's metrics
// file and tells every member of each step.
func (a *agent) train(o *TrainOrder) {
	g := a.gen
	l := o.Layout
	g.ex.mesh, g.ex.peers = l.Mesh, l.Members
	a.log.Info("generation formed", zap.Uint64("generation", o.Gen), zap.Strings("members", o.World.Members),
		zap.String("reason", g.world.Reason), zap.Stringer("world", l.Mesh), zap.Strings("standby", o.World.Standby),
		zap.Int("step", l.Step), zap.String("state_from", o.World.StateFrom), zap.Duration("sync", time.Since(g.committed)))
	if b, err := json.Marshal(o.World); err == nil {
		a.broadcast(g, &workerpb.Progress{World: b})
	}
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
		err := a.lead(g, t, o, pending)
		select {
		case a.trainDone <- trainResult{gen: o.Gen, err: err}:
		case <-a.quit:
		}
	}()
}

// continueScaler gives t the loss scaler's state after the step layout l
// continues from: the one the job reported for that step, or else the one
// a worker that ran it ran with, updated by its outcome (this node's, or
// the one whose training state the generation takes: the scaler's state
// travels with the training state), or the checkpoint's the state comes
// from; without any the scaler starts again from its initial scale, and
// says so.
func (a *agent) continueScaler(t *trainer, l Layout) {
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
func (a *agent) lastRunAt(l Layout) lastRun {
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
func sourceMember(l Layout) int {
	if l.Source.Kind != worker.FromReplica || len(l.Source.Roots) == 0 {
		return -1
	}
	return slices.Index(l.Rank, l.Source.Roots[0])
}

// lead runs generation g's step loop to the job's last step and saves the
// weights; pending, when set, is a step the previous generation trained
// but could not report, which this one continues after.
func (a *agent) lead(g *generation, t *trainer, o *TrainOrder, pending *StepMetrics) error {
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
		if b, err := json.Marshal(m); err == nil {
			a.broadcast(g, &workerpb.Progress{Metrics: b, Step: uint64(m.Step)})
		}
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

// async reports whether the job trains asynchronously (Sync async).
func (a *agent) async() bool { return a.j.cfg.sync().Async() }

// asyncGeneration is generation g's asynchronous executor: this node's
// parameter servers (those it kept, or new ones formed from the order's
// checkpoint or the seed) and a replica for each member, formed by the
// core as a world of one.
func (a *agent) asyncGeneration(g *generation, o *TrainOrder) (*asyncExecutor, error) {
	l := o.Layout
	if l.Source.Kind == worker.FromReplica && a.servers == nil {
		return nil, fmt.Errorf("train: generation %d continues from parameter servers this node does not hold", o.Gen)
	}
	if l.Source.Kind != worker.FromReplica {
		a.dropServers()
		s, err := startServers(g.ctx, a.sys, a.j, 1, l.Step, l.Cursor, a.log)
		if err != nil {
			return nil, err
		}
		s.ckpt = a.ckpt
		a.servers = s
	}
	a.kept = nil
	e, err := newAsyncExecutor(g.ctx, a.servers, len(g.pids), l.Step, &a.j.cfg, a.log)
	if err != nil {
		return nil, err
	}
	e.gen = o.Gen
	names := memberNames(g.world)
	for i, pid := range g.pids {
		rg, err := replicaGroup(a.sys, a.j, fmt.Sprintf("async-gen%d-%s", o.Gen, names[i]), "member "+names[i], o.Gen, pid, false, a.log)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.add(i, rg)
	}
	g.async.Store(e)
	return e, nil
}

// settleAsync ends a generation's executor e: the servers are kept for
// the next generation this node leads when every step e began was applied
// (the sampler's cursor continues exactly after them), else dropped (the
// next generation continues from the latest checkpoint).
func (a *agent) settleAsync(e *asyncExecutor, o *TrainOrder) {
	v, ok := e.settled()
	if err := e.Close(); err != nil {
		a.log.Warn("closing the replicas' groups", zap.Error(err))
	}
	if !ok {
		a.log.Warn("steps were begun and not applied: the parameter servers are dropped, the next generation continues from the latest checkpoint",
			zap.Uint64("generation", o.Gen), zap.Uint64("version", v))
		a.dropServers()
		return
	}
	l := o.Layout
	a.kept, a.keptGen = &ServerState{Step: int(v), Cursor: l.Cursor + data.Cursor((int(v)-l.Step)*o.Batch)}, o.Gen
}

// dropServers stops this node's parameter servers, if any.
func (a *agent) dropServers() {
	a.kept = nil
	if a.servers == nil {
		return
	}
	if err := a.servers.Close(); err != nil {
		a.log.Warn("stopping the parameter servers", zap.Error(err))
	}
	a.servers = nil
}

// keepPending keeps the line of a step the loop could not report but that
// may count (see adoptedError).
func (a *agent) keepPending(err error) {
	var adopted *adoptedError
	if errors.As(err, &adopted) {
		m := adopted.Metrics
		a.pending = &m
	}
}

// broadcast tells every member of generation g.
func (a *agent) broadcast(g *generation, m *workerpb.Progress) {
	for _, pid := range g.pids {
		a.sys.Root().Send(pid, m)
	}
}

// progress takes what the leader said: a generation formed, or a step
// trained. It reports whether the node should now leave (StopAfter).
func (a *agent) progress(p *workerpb.Progress) bool {
	if len(p.World) > 0 {
		var w WorldInfo
		if json.Unmarshal(p.World, &w) != nil {
			return false
		}
		a.formed = w
		a.prom.m().observeWorld(w)
		a.prom.setReady(slices.Contains(w.Members, a.ac.Name))
		if a.o.OnWorld != nil {
			a.o.OnWorld(w)
		}
		return false
	}
	var m StepMetrics
	if json.Unmarshal(p.Metrics, &m) != nil {
		return false
	}
	if m.Scaler != nil {
		if a.scalers == nil {
			a.scalers = map[int]checkpoint.ScalerState{}
		}
		a.scalers[m.Step] = *m.Scaler
		delete(a.scalers, m.Step-8)
	}
	a.prom.m().observeStep(m)
	a.core.Progress()
	if a.o.OnStep != nil {
		a.o.OnStep(m)
	}
	if a.bar != nil {
		a.bar.update(m.Step, m.Loss, m.SamplesPerS, m.TokensPerS)
	}
	return a.o.StopAfter > 0 && m.Step >= a.o.StopAfter
}

// status asks this node's worker what it holds (after the request in
// flight).
func (a *agent) status() (*workerpb.Status, error) {
	res, err := a.sys.Root().RequestFuture(a.shell.PID(), &workerpb.StatusRequest{Checksum: true}, a.j.cfg.StepTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("train: this node's worker: %w", err)
	}
	st := res.(*workerpb.Status)
	return st, st.Failed()
}

// ownStatus asks this node's worker what it holds, without a checksum:
// it is idle between a generation's form and its first step, so it
// answers at once or not at all (salvageTimeout).
func (a *agent) ownStatus() (*workerpb.Status, error) {
	res, err := a.sys.Root().RequestFuture(a.shell.PID(), &workerpb.StatusRequest{}, salvageTimeout).Result()
	if err != nil {
		return nil, err
	}
	st := res.(*workerpb.Status)
	return st, st.Failed()
}

// summary is this node's report at the end.
func (a *agent) summary() *AgentSummary {
	sum := &AgentSummary{Stage: -1}
	st, err := a.status()
	if err != nil {
		a.log.Warn("reading this node's state", zap.Error(err))
		return sum
	}
	sum.Step, sum.Generation, sum.Checksum = int(st.Applied), a.node.World().Gen, fmt.Sprintf("%016x", st.Checksum)
	if st.Rank >= 0 {
		tp := max(1, a.j.cfg.TP)
		sum.Stage, sum.Shard = int(st.HeldPart)/tp, int(st.HeldPart)%tp
		if a.j.zeroShards() > 0 {
			sum.ZeroShard = int(st.HeldZeroShard)
		}
	}
	return sum
}

// finished ends the node's part when the job ended: its summary, and the
// job's failure as this node's error.
func (a *agent) finished(f *workerpb.Finish) (*AgentSummary, error) {
	sum := a.summary()
	if err := f.GetFailure().Err(); err != nil {
		sum.Error = err.Error()
		return sum, err
	}
	sum.Step = int(f.Step) // a member on standby holds an older step: the job's is the target
	a.log.Info("the job reached its target", zap.Uint64("step", f.Step))
	return sum, nil
}

// leave ends this node's part before the job's end: the step in flight
// finishes (the worker answers one request at a time), then the node
// leaves the membership, so that the others go on without it at once.
func (a *agent) leave(why string) (*AgentSummary, error) {
	a.gate.leaving.Store(true) // no step after the one in flight
	a.stopLeading()
	a.handOver()
	sum := a.summary()
	sum.Left = true
	start := time.Now()
	if err := a.node.Leave(5 * time.Second); err != nil {
		a.log.Warn("leave", zap.Error(err))
	}
	a.log.Info("left the job", zap.String("why", why), zap.Int("step", sum.Step), zap.Duration("leave", time.Since(start)))
	return sum, nil
}

// handOver gives the model part this node holds to a standby before it
// leaves, when no other member holds it (one replica of pipeline stages
// or tensor-parallel shards): the next generation then takes the part
// from that standby, instead of restoring the job from a checkpoint or
// losing it. The worker refuses steps already (the gate is leaving), so
// the other parts stay at the step this one holds. Best effort: on a
// failure the node leaves as it would without, and says why.
func (a *agent) handOver() {
	cfg, w := &a.j.cfg, a.formed
	if cfg.PP*max(1, cfg.TP) == 1 || a.j.zeroGroup(cfg.DP) > 0 || cfg.sync().Local() || a.async() ||
		w.DP != 1 || !slices.Contains(w.Members, a.ac.Name) || len(w.Standby) == 0 {
		return
	}
	var to elastic.Member
	for _, m := range a.node.Members() {
		if slices.Contains(w.Standby, m.Name) && m.ActorAddr != "" && (to.ID == "" || m.Name < to.Name) {
			to = m
		}
	}
	if to.ID == "" {
		a.log.Warn("no standby left to hand this node's model part to", zap.Strings("standby", w.Standby))
		return
	}
	start := time.Now()
	res, err := a.sys.Root().RequestFuture(a.shell.PID(), &worker.ExportRequest{}, a.j.cfg.StepTimeout).Result()
	if err == nil {
		err = res.(*worker.Exported).Err
	}
	if err != nil {
		a.log.Warn("handing this node's model part over", zap.Error(err))
		return
	}
	ex := res.(*worker.Exported)
	if ex.State.Hold.Applied == 0 {
		return // the seed's: nothing to lose
	}
	if err := a.sendPart(actor.NewPID(to.ActorAddr, worker.ActorName), ex); err != nil {
		a.log.Warn("handing this node's model part over", zap.String("to", to.Name), zap.Error(err))
		return
	}
	a.log.Info("model part handed over", zap.String("to", to.Name), zap.Int("part", ex.State.Hold.Part),
		zap.Int("step", ex.State.Hold.Applied), zap.Duration("took", time.Since(start)))
}

// handOverChunk is the most values one PartChunk carries (1 MiB), well
// under gRPC's message limit.
const handOverChunk = 1 << 18

// sendPart sends ex's part to the worker at pid, a chunk at a time, and
// checks that it then holds the same parameters.
func (a *agent) sendPart(pid *actor.PID, ex *worker.Exported) error {
	ps := ex.State
	lens := make([]uint64, len(ps.Bufs))
	for i, b := range ps.Bufs {
		lens[i] = uint64(len(b))
	}
	for b, buf := range ps.Bufs {
		for off := 0; off == 0 || off < len(buf); off += handOverChunk {
			end := min(off+handOverChunk, len(buf))
			m := &workerpb.PartChunk{Part: int32(ps.Hold.Part), Applied: uint64(ps.Hold.Applied), Cursor: uint64(ps.Hold.Cursor),
				World0: uint32(ps.Hold.World0), OptSteps: uint64(ps.Steps), Lens: lens, Buffer: uint32(b), Offset: uint64(off),
				Values: buf[off:end], Last: b == len(ps.Bufs)-1 && end == len(buf)}
			res, err := a.sys.Root().RequestFuture(pid, m, a.j.cfg.CollectiveTimeout).Result()
			if err != nil {
				return err
			}
			t, ok := res.(*workerpb.PartTaken)
			if !ok {
				return fmt.Errorf("train: %T answers a hand-over", res)
			}
			if err := t.Failed(); err != nil {
				return err
			}
			if m.Last && t.Checksum != ex.Checksum {
				return fmt.Errorf("train: the standby holds checksum %016x after the hand-over, this node %016x", t.Checksum, ex.Checksum)
			}
		}
	}
	return nil
}

// nodeGate brackets the worker's steps with the membership's Hold and
// Release, so that a world changes only between steps. It refuses steps
// until the node has joined, and once it leaves.
type nodeGate struct {
	node    atomic.Pointer[elastic.Node]
	leaving atomic.Bool
}

func (g *nodeGate) Hold() bool {
	n := g.node.Load()
	return n != nil && !g.leaving.Load() && n.Hold()
}

func (g *nodeGate) Release() {
	if n := g.node.Load(); n != nil {
		n.Release()
	}
}

// mailbox queues what the worker actor tells its node, without bound, so
// that the actor never blocks on the node's loop.
type mailbox struct {
	mu   sync.Mutex
	q    []any
	wake chan struct{} // size 1: "something was queued"
}

func newMailbox() *mailbox { return &mailbox{wake: make(chan struct{}, 1)} }

func (m *mailbox) put(v any) {
	m.mu.Lock()
	m.q = append(m.q, v)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mailbox) ready() <-chan struct{} { return m.wake }

func (m *mailbox) take() []any {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q
	m.q = nil
	return q
}

func memberNames(w elastic.World) []string {
	out := make([]string, len(w.Members))
	for i, m := range w.Members {
		out[i] = m.Name
	}
	return out
}
