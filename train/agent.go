package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/replica"
)

// AgentConfig is one node of an elastic job (troupe agent): one OS process
// with one data-parallel worker.
type AgentConfig struct {
	// Train is the training run every node of the job shares.
	Train Config
	// Name is the stable node ID (--name).
	Name string
	// Listen is the gossip address host:port (--listen); the node's actor
	// system and data plane listen on the same host, on free ports.
	Listen string
	// Join lists gossip addresses of other nodes (--join).
	Join []string
	// MinNodes and MaxNodes bound the world (--min-nodes, --max-nodes).
	MinNodes, MaxNodes int
	// Quorum is "majority" (default) or "any".
	Quorum string
	// Key is the cluster key (see elastic.ParseKey); empty: gossip is
	// not encrypted.
	Key string
	// Timings is the failure detector preset: fast (default), lan or wan.
	Timings string
	// JoinTimeout bounds the wait for an answer from the Join list
	// (default 30 s).
	JoinTimeout time.Duration
	// Rescale is what a world of another size keeps: "keep-global-batch"
	// (default: the global batch; each rank's share changes) or
	// "linear-lr" (each rank's batch; the global batch and the learning
	// rate scale with the world, the linear scaling rule).
	Rescale string
}

// Validate checks the configuration.
func (c *AgentConfig) Validate() error {
	if err := c.Train.Validate(); err != nil {
		return err
	}
	if c.Train.DP != 1 || c.Train.PP != 1 || c.Train.Procs != 0 || c.Train.Accum != 1 {
		return fmt.Errorf("%w: an agent runs one data-parallel worker: --dp, --pp, --procs and --accum do not apply", ErrConfig)
	}
	if c.Name == "" || c.Listen == "" {
		return fmt.Errorf("%w: troupe agent needs --name and --listen", ErrConfig)
	}
	if c.Rescale == "" {
		c.Rescale = "keep-global-batch"
	}
	if c.Rescale != "keep-global-batch" && c.Rescale != "linear-lr" {
		return fmt.Errorf("%w: --rescale %q: want keep-global-batch or linear-lr", ErrConfig, c.Rescale)
	}
	return nil
}

// AgentSummary is what an agent reports when the job ends (troupe agent
// prints it as JSON).
type AgentSummary struct {
	Name       string `json:"name"`
	Member     string `json:"member"`
	Step       int    `json:"step"`
	Generation uint64 `json:"generation"`
	Checksum   string `json:"checksum"`
	// Led counts the generations this agent led.
	Led int `json:"generations_led"`
	// Left is true when the agent left the job before its end (SIGTERM).
	Left bool `json:"left"`
}

// agent is one elastic node's state. The agent actor owns the replica and
// the training state (applied, cursor, world0, gen, comm, worker); the
// main goroutine watches the membership and starts a leader loop while
// this node is rank 0.
type agent struct {
	ac    AgentConfig
	cfg   *Config
	log   *zap.Logger
	sys   *actors.System
	node  *elastic.Node
	train data.Dataset
	test  data.Dataset
	rep   *replica.Replica
	pid   *actor.PID

	// owned by the agent actor
	applied int
	cursor  data.Cursor
	world0  int
	gen     uint64
	rank    int
	comm    collective.Communicator
	worker  *ddp.Worker

	mu         sync.Mutex
	stepCancel context.CancelFunc

	finished chan *actorspb.AgentFinish
	led      int
}

// RunAgent runs one node of an elastic job until the job reaches its target
// step, the node leaves (ctx cancelled: SIGTERM), or an error.
func RunAgent(ctx context.Context, ac AgentConfig, o Options) (*AgentSummary, error) {
	if err := ac.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("node", ac.Name))
	cfg := &ac.Train
	trainSet, testSet, err := OpenData(cfg)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(ac.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w: --listen %q: %v", ErrConfig, ac.Listen, err)
	}
	quorum, err := elastic.ParseQuorum(orDefault(ac.Quorum, "majority"))
	if err != nil {
		return nil, fmt.Errorf("%w: --quorum: %v", ErrConfig, err)
	}
	timings, err := elastic.ParseTimings(orDefault(ac.Timings, "fast"))
	if err != nil {
		return nil, fmt.Errorf("%w: --timings: %v", ErrConfig, err)
	}
	var key []byte
	if ac.Key != "" {
		if key, err = elastic.ParseKey(ac.Key); err != nil {
			return nil, fmt.Errorf("%w: --key: %v", ErrConfig, err)
		}
	}
	be, err := kernels.Open(cfg.Device, kernels.Options{Threads: cfg.Threads})
	if err != nil {
		return nil, fmt.Errorf("train: --device %s: %w", cfg.Device, err)
	}
	model, err := BuildModel(cfg, be, trainSet)
	if err != nil {
		return nil, err
	}
	opt, err := optim.New(model.Set, cfg.Optim)
	if err != nil {
		return nil, err
	}
	a := &agent{ac: ac, cfg: cfg, log: log, train: trainSet, test: testSet, rep: replica.New(model, opt),
		finished: make(chan *actorspb.AgentFinish, 1)}
	if cfg.Resume {
		start, st, err := resumePoint(cfg, log)
		if err != nil {
			return nil, err
		}
		if err := restore(cfg, model, opt); err != nil {
			return nil, err
		}
		if st != nil {
			a.applied, a.cursor = start, st.Cursor
		}
	}
	if a.sys, err = actors.NewSystem(actors.SystemConfig{Remote: true, Host: host, Logger: log}); err != nil {
		return nil, err
	}
	defer a.sys.Close()
	props := actor.PropsFromProducer(func() actor.Actor { return a })
	if a.pid, err = a.sys.Root().SpawnNamed(props, agentActorName); err != nil {
		return nil, err
	}
	defer a.closeComm()
	a.node, err = elastic.Start(ctx, elastic.Config{
		Name: ac.Name, BindAddr: ac.Listen, Join: ac.Join, JoinTimeout: ac.JoinTimeout, MinNodes: ac.MinNodes, MaxNodes: ac.MaxNodes,
		Quorum: quorum, Key: key, Timings: timings, Devices: []string{be.Caps().Device},
	}, a.sys, elastic.WithLogger(log))
	if err != nil {
		return nil, err
	}
	sum, err := a.run(ctx)
	if sum != nil {
		sum.Name, sum.Member = ac.Name, a.node.Self().ID
		sum.Led = a.led
	}
	if sum == nil || !sum.Left {
		if cerr := a.node.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
			log.Warn("closing the membership", zap.Error(cerr))
		}
	}
	return sum, err
}

// agentActorName is the agent actor's name on every node.
const agentActorName = "agent"

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// leaderRun is one generation's leader loop, running in its own goroutine.
type leaderRun struct {
	gen    uint64
	cancel context.CancelFunc
	done   chan leaderResult
}

type leaderResult struct {
	finished bool
	err      error
}

// run watches the membership: each committed world starts a leader loop on
// its rank 0; a failure signal aborts the step in flight; the job ends when
// the leader sends AgentFinish.
func (a *agent) run(ctx context.Context) (*AgentSummary, error) {
	var lead *leaderRun
	stopLead := func() {
		if lead != nil {
			lead.cancel()
			<-lead.done
			lead = nil
		}
	}
	defer stopLead()
	var retry <-chan time.Time
	var current elastic.World
	for {
		var leadDone chan leaderResult
		if lead != nil {
			leadDone = lead.done
		}
		select {
		case <-ctx.Done():
			stopLead()
			return a.leave()
		case f := <-a.finished:
			if lead != nil {
				// This node leads: its loop is still collecting the other
				// members' answers to AgentFinish; leaving now could drop
				// the messages to them still queued in the remote writers.
				<-lead.done
				lead = nil
			}
			return &AgentSummary{Step: int(f.Step), Generation: f.Generation, Checksum: fmt.Sprintf("%016x", ddp.Checksum(a.rep.Model.Set.HostWeights()))}, nil
		case ev := <-a.node.Events():
			switch ev.Kind {
			case elastic.EventFailed, elastic.EventLeft:
				// The first membership signal of a lost peer of this world:
				// a step waiting on it (a hung process sends no reset) stops
				// now. A member of an older world is none of this step's.
				if current.Rank(ev.Member.ID) >= 0 {
					a.abortStep(fmt.Sprintf("%s %s", ev.Kind, ev.Member.Name))
				}
				a.log.Warn("member lost", zap.String("member", ev.Member.Name), zap.Stringer("kind", ev.Kind),
					zap.Duration("detection", ev.Silence))
			case elastic.EventProposed:
				// A new world is being agreed (a join, a leave): the step in
				// flight is abandoned on every rank (the collectives abort it
				// everywhere once one rank leaves it) and retried in the new
				// generation; a rank that refused the step (its Hold failed)
				// would otherwise leave the others waiting in it.
				if ev.World.Rank(a.node.Self().ID) >= 0 {
					a.abortStep(fmt.Sprintf("generation %d proposed", ev.World.Gen))
				}
			case elastic.EventCommitted:
				a.log.Info("transition", zap.Uint64("generation", ev.World.Gen), zap.Strings("members", memberNames(ev.World)),
					zap.String("reason", ev.World.Reason), zap.Duration("rendezvous", ev.Rendezvous))
			}
		case w := <-a.node.Worlds():
			// A step in flight belongs to an older generation: members
			// hold their acknowledgement until their step ends, so only a
			// member left out of the new world (a hung one, now awake) can
			// still be in one; its peers are gone, it must not wait.
			a.abortStep(fmt.Sprintf("generation %d committed", w.Gen))
			stopLead()
			retry = nil
			current = w
			if w.Rank(a.node.Self().ID) == 0 {
				lead = a.startLeader(w)
			}
		case res := <-leadDone:
			lead = nil
			if res.finished {
				continue // AgentFinish reaches this node's actor too
			}
			a.log.Warn("generation failed; waiting for the next", zap.Uint64("generation", current.Gen), zap.Error(res.err))
			retry = time.After(3 * time.Second)
		case <-retry:
			// The step failed but the membership did not change (a
			// collective timeout between live members): ask for a new
			// generation with the same members.
			retry = nil
			a.node.Request("generation " + strconv.FormatUint(current.Gen, 10) + " failed")
		}
	}
}

func memberNames(w elastic.World) []string {
	out := make([]string, len(w.Members))
	for i, m := range w.Members {
		out[i] = m.Name
	}
	return out
}

// abortStep cancels the step this node runs, if any.
func (a *agent) abortStep(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stepCancel != nil {
		a.log.Info("aborting the step in flight", zap.String("reason", reason))
		a.stepCancel()
	}
}

// leave ends this node's part after SIGTERM: the step in flight finishes
// (the agent actor handles one message at a time), then the node leaves
// the membership so that the others go on without it at once.
func (a *agent) leave() (*AgentSummary, error) {
	res, err := a.sys.Root().RequestFuture(a.pid, &leaveRequest{}, a.cfg.StepTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("train: leaving: %w", err)
	}
	st := res.(*leaveDone)
	start := time.Now()
	if err := a.node.Leave(5 * time.Second); err != nil {
		a.log.Warn("leave", zap.Error(err))
	}
	a.log.Info("left the job", zap.Int("step", st.applied), zap.Duration("leave", time.Since(start)))
	return &AgentSummary{Step: st.applied, Generation: st.gen, Left: true,
		Checksum: fmt.Sprintf("%016x", st.checksum)}, nil
}

type leaveRequest struct{}

type leaveDone struct {
	applied  int
	gen      uint64
	checksum uint64
}

// Receive is the agent actor: the only code that touches the replica.
func (a *agent) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actorspb.AgentStatusRequest:
		c.Respond(&actorspb.AgentStatus{Rank: m.Rank, AppliedStep: uint64(a.applied), Cursor: uint64(a.cursor),
			World0: uint32(a.world0), Name: a.ac.Name})
	case *actorspb.AgentSync:
		done := &actorspb.AgentSyncDone{Rank: m.Rank}
		if err := a.sync(m); err != nil {
			done.Error = err.Error()
			a.log.Warn("sync failed", zap.Uint64("generation", m.Generation), zap.Error(err))
		} else {
			done.Checksum = ddp.Checksum(a.rep.Model.Set.HostWeights())
		}
		c.Respond(done)
	case *actorspb.RunStep:
		c.Respond(a.step(m))
	case *actorspb.EvalRequest:
		done := &actorspb.EvalDone{Rank: uint32(a.rank)}
		if a.worker == nil {
			done.Error = "no world"
		} else if res, rows, err := a.worker.Evaluate(int(m.Lo), int(m.Hi)); err != nil {
			done.Error = err.Error()
		} else {
			done.LossSum, done.Targets, done.Correct, done.Rows = res.LossSum, uint64(res.Targets), uint64(res.Correct), uint64(rows)
		}
		c.Respond(done)
	case *actorspb.WeightsRequest:
		c.Respond(&actorspb.Weights{Data: floatBytes(a.rep.Model.Set.HostWeights()), Rank: uint32(a.rank)})
	case *actorspb.SaveShard:
		n, err := actors.SaveShard(m, a.rep.Model, a.rep.Opt, a.rank, 0)
		done := &actorspb.ShardSaved{Rank: uint32(a.rank), Bytes: uint64(n)}
		if err != nil {
			done.Error = err.Error()
		}
		c.Respond(done)
	case *actorspb.AgentFinish:
		c.Respond(&actorspb.AgentFinished{Rank: m.Rank, Checksum: ddp.Checksum(a.rep.Model.Set.HostWeights())})
		a.log.Info("the job reached its target", zap.Uint64("generation", m.Generation), zap.Uint64("step", m.Step))
		select {
		case a.finished <- m:
		default:
		}
	case *leaveRequest:
		c.Respond(&leaveDone{applied: a.applied, gen: a.gen, checksum: ddp.Checksum(a.rep.Model.Set.HostWeights())})
	}
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		u := math.Float32bits(f)
		b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return b
}

func (a *agent) closeComm() {
	if a.comm != nil {
		a.comm.Close()
		a.comm, a.worker = nil, nil
	}
}

// sync joins generation m.Generation: a new communicator among its members,
// then the training state broadcast from rank m.Root, whose replica is the
// most advanced (every survivor applied the same steps, but one may have
// applied the step in flight when the failure struck).
func (a *agent) sync(m *actorspb.AgentSync) error {
	a.closeComm()
	world := len(m.Addrs)
	cc := commConfig(a.cfg, a.log)
	cc.World = fmt.Sprintf("gen%d", m.Generation)
	comm, err := actors.StartRemote(a.sys, actors.RemoteWorld{Rank: int(m.Rank), Addrs: m.Addrs}, cc)
	if err != nil {
		return err
	}
	w, err := ddp.NewWorker(ddp.WorkerConfig{
		Rank: int(m.Rank), World: world, Replica: a.rep, Comm: comm,
		Train: a.train, Test: a.test, Shuffle: a.cfg.Shuffle, Seed: a.cfg.Seed,
		BucketBytes: int64(a.cfg.BucketMB * (1 << 20)), ClipNorm: a.cfg.ClipNorm,
	})
	if err != nil {
		comm.Close()
		return err
	}
	a.comm, a.worker, a.rank, a.gen = comm, w, int(m.Rank), m.Generation
	if world > 1 {
		set := a.rep.Model.Set
		bufs := []kernels.Buffer{set.Weights()}
		for _, st := range a.rep.Opt.States() {
			bufs = append(bufs, st.Buf)
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StepTimeout)
		defer cancel()
		for _, b := range bufs {
			host := make([]float32, b.Len())
			a.rep.Be.Download(host, b)
			if err := comm.Broadcast(ctx, host, int(m.Root)).Wait(); err != nil {
				a.closeComm()
				return fmt.Errorf("state from rank %d: %w", m.Root, err)
			}
			a.rep.Be.Upload(b, host)
		}
	}
	a.applied, a.cursor, a.world0 = int(m.Step), data.Cursor(m.Cursor), int(m.World0)
	a.rep.Opt.SetSteps(int(m.Step))
	return nil
}

// step runs one step of the current generation, bracketed by the
// membership's Hold and Release so that the world changes only between
// steps, and abortable by a failure signal.
func (a *agent) step(m *actorspb.RunStep) *actorspb.StepDone {
	done := &actorspb.StepDone{Generation: m.Generation, Step: m.Step, Rank: uint32(a.rank)}
	switch {
	case a.worker == nil || m.Generation != a.gen:
		done.Error = fmt.Sprintf("this node is in generation %d, the step is for %d", a.gen, m.Generation)
		return done
	case int(m.Step) != a.applied:
		done.Error = fmt.Sprintf("this node applied %d steps, the leader asks for step %d", a.applied, m.Step+1)
		return done
	case !a.node.Hold():
		done.Error = "a new world is being formed"
		return done
	}
	defer a.node.Release()
	ctx, cancel := context.WithCancel(context.Background())
	a.mu.Lock()
	a.stepCancel = cancel
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.stepCancel = nil
		a.mu.Unlock()
		cancel()
	}()
	res, err := a.worker.Step(ctx, ddp.StepRequest{Generation: m.Generation, Step: m.Step, Cursor: data.Cursor(m.Cursor),
		Batch: int(m.Batch), Accum: 1, LR: m.Lr, GlobalTargets: int(m.GlobalTargets), Checksum: m.Checksum})
	if err != nil {
		done.Error = err.Error()
		return done
	}
	a.applied, a.cursor = int(m.Step)+1, data.Cursor(m.Cursor)+data.Cursor(m.Batch)
	done.LossSum, done.Targets, done.Correct = res.LossSum, uint64(res.Targets), uint64(res.Correct)
	done.ComputeMs, done.CommMs, done.ExposedCommMs = res.ComputeMs, res.CommMs, res.ExposedMs
	done.GradNorm, done.Checksum, done.StepMs, done.ScheduleMs = res.GradNorm, res.Checksum, res.StepMs, res.ScheduleMs
	return done
}

// startLeader starts the leader loop of world w on this node.
func (a *agent) startLeader(w elastic.World) *leaderRun {
	ctx, cancel := context.WithCancel(context.Background())
	l := &leaderRun{gen: w.Gen, cancel: cancel, done: make(chan leaderResult, 1)}
	a.led++
	go func() {
		finished, err := a.lead(ctx, w)
		l.done <- leaderResult{finished: finished, err: err}
	}()
	return l
}

// lead drives generation w from its rank 0: it finds the most advanced
// replica, syncs every member from it, and runs steps until the target,
// the world's end (ctx) or a failed step.
func (a *agent) lead(ctx context.Context, w elastic.World) (bool, error) {
	cfg := a.cfg
	committed := time.Now()
	n := w.Size()
	pids := make([]*actor.PID, n)
	addrs := make([]string, n)
	for r, m := range w.Members {
		pids[r] = actor.NewPID(m.ActorAddr, agentActorName)
		addrs[r] = m.ActorAddr
	}
	coordPID, err := actors.SpawnCoordinator(a.sys, actors.CoordinatorConfig{
		Name: fmt.Sprintf("%s-gen%d", actors.CoordinatorActorName, w.Gen), Workers: pids, CallTimeout: cfg.StepTimeout,
	})
	if err != nil {
		return false, err
	}
	defer a.sys.Root().Stop(coordPID)
	// call asks the coordinator and waits for its answer; when the world is
	// superseded (ctx), the coordinator is told to give up at once, so that
	// a member that hangs without a reset does not hold the leader.
	call := func(msg any) (any, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := a.sys.Root().RequestFuture(coordPID, msg, cfg.StepTimeout+30*time.Second)
		answered := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				a.sys.Root().Send(coordPID, &actors.CancelCall{Reason: "generation superseded"})
			case <-answered:
			}
		}()
		res, err := f.Result()
		close(answered)
		wg.Wait()
		return res, err
	}
	gather := func(msgs []any) ([]any, error) {
		res, err := call(&actors.GatherCall{Msgs: msgs})
		if err != nil {
			return nil, err
		}
		rep := res.(*actors.GatherReport)
		return rep.Replies, rep.Err
	}

	// 1. Who holds the most advanced state?
	msgs := make([]any, n)
	for r := range msgs {
		msgs[r] = &actorspb.AgentStatusRequest{Generation: w.Gen, Rank: uint32(r)}
	}
	replies, err := gather(msgs)
	if err != nil {
		return false, fmt.Errorf("status of generation %d: %w", w.Gen, err)
	}
	root, world0 := 0, 0
	for r, rep := range replies {
		st := rep.(*actorspb.AgentStatus)
		if st.AppliedStep > replies[root].(*actorspb.AgentStatus).AppliedStep {
			root = r
		}
		world0 = max(world0, int(st.World0))
	}
	rs := replies[root].(*actorspb.AgentStatus)
	if world0 == 0 {
		world0 = n // the job's first world
	}
	step, cursor := int(rs.AppliedStep), data.Cursor(rs.Cursor)

	// 2. Form the generation: every member joins its collectives and takes
	// the state from root.
	for r := range msgs {
		msgs[r] = &actorspb.AgentSync{Generation: w.Gen, Rank: uint32(r), Addrs: addrs, Root: uint32(root),
			Step: uint64(step), Cursor: uint64(cursor), World0: uint32(world0)}
	}
	if replies, err = gather(msgs); err != nil {
		return false, fmt.Errorf("forming generation %d: %w", w.Gen, err)
	}
	for r, rep := range replies {
		if c := rep.(*actorspb.AgentSyncDone).Checksum; c != replies[0].(*actorspb.AgentSyncDone).Checksum {
			return false, fmt.Errorf("%w: after the state transfer rank %d holds other weights than rank 0", ErrDiverged, r)
		}
	}
	a.log.Info("generation formed", zap.Uint64("generation", w.Gen), zap.Strings("members", memberNames(w)),
		zap.String("reason", w.Reason), zap.Int("step", step), zap.Int("state_from_rank", root),
		zap.Duration("sync", time.Since(committed)))

	// 3. Train.
	steps := cfg.Steps
	if cfg.Epochs > 0 {
		steps = int(math.Ceil(cfg.Epochs * float64(a.train.Len()) / float64(cfg.Batch)))
	}
	batch, lr := cfg.Batch, 1.0
	if a.ac.Rescale == "linear-lr" {
		per := max(1, cfg.Batch/world0)
		batch, lr = per*n, optim.LinearScaling(1, world0, n)
	}
	sched := cfg.schedule(steps)
	sampler, err := data.NewSampler(a.train.Len(), cfg.Seed, cfg.Shuffle)
	if err != nil {
		return false, err
	}
	var mw *metricsWriter
	if cfg.MetricsOut != "" {
		if mw, err = appendMetricsWriter(cfg.MetricsOut); err != nil {
			return false, err
		}
		defer mw.close()
	}
	ckpt, err := newCheckpointer(cfg, false, a.log)
	if err != nil {
		return false, err
	}
	var b data.Batch
	var idx []int
	first := true
	for ; step < steps; step++ {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		t0 := time.Now()
		idx = sampler.At(cursor, batch, idx)
		a.train.Fill(idx, &b)
		check := cfg.CheckEvery > 0 && (step+1)%cfg.CheckEvery == 0
		req := &actorspb.RunStep{Generation: w.Gen, Step: uint64(step), Cursor: uint64(cursor), Batch: uint32(batch), Accum: 1,
			Lr: sched.LR(step) * lr, GlobalTargets: uint64(globalTargets(&b)), Checksum: check, World: uint32(n)}
		res, err := call(&actors.StepCall{Req: req})
		if err != nil {
			return false, err
		}
		rep := res.(*actors.StepReport)
		if rep.Err != nil {
			return false, fmt.Errorf("generation %d, step %d: %w", w.Gen, step+1, rep.Err)
		}
		var lossSum float64
		var targets int
		m := StepMetrics{Step: step + 1, LR: req.Lr, World: n, Generation: w.Gen, DP: n, PP: 1, Micro: 1, Accum: 1}
		for r, d := range rep.Dones {
			lossSum += d.LossSum
			targets += int(d.Targets)
			m.ComputeMs = math.Max(m.ComputeMs, d.ComputeMs)
			m.CommMs = math.Max(m.CommMs, d.CommMs)
			if check && d.Checksum != rep.Dones[0].Checksum {
				return false, fmt.Errorf("%w: after step %d rank %d's parameters differ from rank 0's", ErrDiverged, step+1, r)
			}
		}
		stepMs := ms(time.Since(t0))
		m.Loss, m.StepMs = lossSum/math.Max(1, float64(targets)), stepMs
		m.SamplesPerS = float64(batch) / (stepMs / 1e3)
		if a.rep.Model.Context > 0 {
			m.TokensPerS = m.SamplesPerS * float64(a.rep.Model.Context)
		}
		m.Cursor, m.Batch = uint64(cursor), batch
		cursor += data.Cursor(batch)
		m.Samples = int64(cursor)
		m.Epoch = float64(cursor) / float64(a.train.Len())
		if first {
			first = false
			m.ResumeMs = ms(time.Since(committed))
			a.log.Info("training resumed", zap.Uint64("generation", w.Gen), zap.Int("step", step+1),
				zap.Duration("since_commit", time.Since(committed)))
		}
		if ckpt != nil && cfg.CkptEvery > 0 && (step+1)%cfg.CkptEvery == 0 {
			sampler.Seek(cursor)
			meta := ckpt.meta(step+1, w.Gen, sampler, sched)
			meta.World.DP = n
			pause, err := ckpt.save(&procsShards{call: call}, meta)
			if err != nil {
				return false, err
			}
			m.CkptPauseMs = ms(pause)
		}
		if mw != nil {
			if err := mw.write(m); err != nil {
				return false, err
			}
		}
		if (step+1)%cfg.LogEvery == 0 {
			a.log.Info("step", zap.Uint64("generation", w.Gen), zap.Int("step", step+1), zap.Int("of", steps),
				zap.Float64("loss", m.Loss), zap.Int("world", n), zap.Float64("step_ms", stepMs))
		}
	}

	// 4. The job is done: every member reports its checksum, all equal.
	for r := range msgs {
		msgs[r] = &actorspb.AgentFinish{Generation: w.Gen, Step: uint64(step), Rank: uint32(r)}
	}
	replies, err = gather(msgs)
	// The members exit once they answered: stop watching them first.
	_ = a.sys.Root().StopFuture(coordPID).Wait()
	if err != nil {
		return false, fmt.Errorf("finishing: %w", err)
	}
	for r, rep := range replies {
		if c := rep.(*actorspb.AgentFinished).Checksum; c != replies[0].(*actorspb.AgentFinished).Checksum {
			return true, fmt.Errorf("%w: at the end rank %d's parameters differ from rank 0's", ErrDiverged, r)
		}
	}
	if cfg.Save != "" {
		if err := a.rep.Model.Set.SaveWeights(cfg.Save, map[string]string{"format": "pt", "step": fmt.Sprint(step)}); err != nil {
			return true, err
		}
	}
	a.log.Info("job finished", zap.Int("step", step), zap.Uint64("generation", w.Gen), zap.Int("world", n))
	return true, nil
}

// procsShards writes a checkpoint from the agents through the leader's
// coordinator (the shardWriter of an elastic job).
type procsShards struct {
	call func(any) (any, error)
}

func (p *procsShards) saveShards(step int64, dir, tmp string, meta []byte) (int64, error) {
	res, err := p.call(&actors.SaveCall{Req: &actorspb.SaveShard{Step: uint64(step), Dir: dir, Tmp: tmp, Meta: meta}})
	if err != nil {
		return 0, err
	}
	rep := res.(*actors.SaveReport)
	return rep.Bytes, rep.Err
}
