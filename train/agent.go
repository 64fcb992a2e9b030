package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/replica"
	"github.com/troupe-ml/troupe/stage"
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
	// LostStageTimeout bounds the wait for a pipeline stage that no
	// member holds and no checkpoint can restore (every holder died, and
	// there is no --ckpt-dir checkpoint): a holder may still come back (a
	// hung or partitioned node keeps its state), but after this long every
	// agent exits with ErrStageLost. 0 means one minute.
	LostStageTimeout time.Duration
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
	if c.Train.DP != 1 || c.Train.Procs != 0 || c.Train.Accum != 1 {
		return fmt.Errorf("%w: an agent runs one worker (a replica, or a pipeline stage with --pp): --dp, --procs and --accum do not apply", ErrConfig)
	}
	if c.Train.Trace != "" {
		return fmt.Errorf("%w: --trace records the pipeline of one troupe train run (--pp, with or without --procs); agents have no process that sees every stage", ErrConfig)
	}
	if c.Train.PP > 1 && c.Train.Partition == "time" {
		return fmt.Errorf("%w: agents cut the pipeline by parameters or --stage-layers: --partition time would cut differently on each node", ErrConfig)
	}
	if c.Name == "" || c.Listen == "" {
		return fmt.Errorf("%w: troupe agent needs --name and --listen", ErrConfig)
	}
	if c.Rescale == "" {
		c.Rescale = "keep-global-batch"
	}
	if c.LostStageTimeout < 0 {
		return fmt.Errorf("%w: --lost-stage-timeout %s is negative", ErrConfig, c.LostStageTimeout)
	}
	if c.LostStageTimeout == 0 {
		c.LostStageTimeout = time.Minute
	}
	if c.Rescale != "keep-global-batch" && c.Rescale != "linear-lr" {
		return fmt.Errorf("%w: --rescale %q: want keep-global-batch or linear-lr", ErrConfig, c.Rescale)
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
	// pipelining, -1 on standby): checksums compare within a stage.
	Stage      int    `json:"stage"`
	Generation uint64 `json:"generation"`
	Checksum   string `json:"checksum"`
	// Led counts the generations this agent led.
	Led int `json:"generations_led"`
	// Left is true when the agent left the job before its end (SIGTERM).
	Left bool `json:"left"`
	// Error is why the job could not go on, when it ended that way.
	Error string `json:"error,omitempty"`
}

// ErrStageLost ends an elastic pipeline job whose stage no member holds
// and no checkpoint can restore, after AgentConfig.LostStageTimeout.
var ErrStageLost = errors.New("train: a pipeline stage is lost")

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
	be    kernels.Backend
	spec  nn.Spec
	cuts  []pipeline.Range
	sched *pipeline.Schedule // nil without pipelining
	pid   *actor.PID

	// owned by the agent actor
	model   *nn.Model
	opt     optim.Optimizer
	rep     *replica.Replica // the model as a data-parallel replica (one stage)
	held    int              // the stage model holds the state of, -1 before any
	applied int
	cursor  data.Cursor
	world0  int
	gen     uint64
	rank    int // grid rank in generation gen, -1 on standby
	stage   int
	comm    collective.Communicator
	worker  ddp.Stepper
	undo    undoState // pipeline stages only

	mu         sync.Mutex
	stepCancel context.CancelFunc

	finished chan *AgentSummary
	led      int
	// lostSince is when the leader first found a stage it cannot restore
	// (zero while none is lost); only leader loops, one at a time, use it.
	lostSince time.Time
}

// RunAgent runs one node of an elastic job until the job reaches its target
// step, the node leaves (ctx cancelled: SIGTERM), or an error.
func RunAgent(ctx context.Context, ac AgentConfig, o Options) (*AgentSummary, error) {
	if err := ac.Validate(); err != nil {
		return nil, err
	}
	log := o.logger().With(zap.String("node", ac.Name))
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
	whole, err := BuildModel(cfg, be, trainSet)
	if err != nil {
		return nil, err
	}
	a := &agent{ac: ac, cfg: cfg, log: log, train: trainSet, test: testSet, be: be, spec: whole.Spec,
		held: -1, rank: -1, finished: make(chan *AgentSummary, 1)}
	plan, err := planWorld(cfg, whole, trainSet)
	if err != nil {
		return nil, err
	}
	a.cuts = plan.cuts
	// A node holds no stage until its first generation gives it one, from
	// the seed, a surviving replica or (--resume, a lost stage) the latest
	// checkpoint: the leader decides.
	a.sched = plan.sched
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
			if f.Error != "" {
				return f, fmt.Errorf("%w: %s", ErrStageLost, f.Error)
			}
			return f, nil
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
	sum := res.(*AgentSummary)
	start := time.Now()
	if err := a.node.Leave(5 * time.Second); err != nil {
		a.log.Warn("leave", zap.Error(err))
	}
	a.log.Info("left the job", zap.Int("step", sum.Step), zap.Duration("leave", time.Since(start)))
	return sum, nil
}

type leaveRequest struct{}

// undoState is a pipeline stage's state from before its last step, kept so
// that a torn step (some stages applied it, another did not) can be undone
// instead of losing the job to it (see undoTornStep): the stage's weights
// and optimizer state, copied before every step into buffers allocated
// once per stage, and the step and cursor they belong to.
type undoState struct {
	bufs    []kernels.Buffer
	valid   bool
	applied int
	cursor  data.Cursor
}

// Receive is the agent actor: the only code that touches the model.
func (a *agent) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actorspb.AgentStatusRequest:
		c.Respond(&actorspb.AgentStatus{Rank: m.Rank, AppliedStep: uint64(a.applied), Cursor: uint64(a.cursor),
			World0: uint32(a.world0), Name: a.ac.Name, HeldStage: int32(a.held), CanRollBack: a.undo.valid})
	case *actorspb.AgentSync:
		done := &actorspb.AgentSyncDone{Rank: m.Member}
		if err := a.sync(m); err != nil {
			done.Error = err.Error()
			a.log.Warn("sync failed", zap.Uint64("generation", m.Generation), zap.Error(err))
		} else if a.model != nil {
			done.Checksum = ddp.Checksum(a.model.Set.HostWeights())
		}
		c.Respond(done)
	case *actorspb.RunStep:
		c.Respond(a.step(m))
	case *actorspb.EvalRequest:
		done := &actorspb.EvalDone{Rank: uint32(a.rank)}
		if a.worker == nil {
			done.Error = "no slot in this generation"
		} else if res, rows, err := a.worker.Evaluate(int(m.Lo), int(m.Hi)); err != nil {
			done.Error = err.Error()
		} else {
			done.LossSum, done.Targets, done.Correct, done.Rows = res.LossSum, uint64(res.Targets), uint64(res.Correct), uint64(rows)
		}
		c.Respond(done)
	case *actorspb.WeightsRequest:
		done := &actorspb.Weights{Rank: uint32(a.rank)}
		if a.worker == nil {
			done.Error = "no slot in this generation"
		} else {
			done.Data = floatBytes(a.worker.Weights())
		}
		c.Respond(done)
	case *actorspb.SaveShard:
		done := &actorspb.ShardSaved{Rank: uint32(a.rank)}
		if a.worker == nil {
			done.Error = "no slot in this generation"
		} else if n, err := actors.SaveShard(m, a.model, a.opt, a.rank, a.stage); err != nil {
			done.Error = err.Error()
		} else {
			done.Bytes = uint64(n)
		}
		c.Respond(done)
	case *actorspb.AgentFinish:
		sum := a.summary(int(m.Step), m.Generation)
		c.Respond(&actorspb.AgentFinished{Rank: m.Rank, Checksum: a.checksum()})
		if m.Error != "" {
			sum.Step, sum.Error = a.applied, m.Error
			a.log.Error("the job cannot go on", zap.Uint64("generation", m.Generation), zap.String("error", m.Error))
		} else {
			a.log.Info("the job reached its target", zap.Uint64("generation", m.Generation), zap.Uint64("step", m.Step))
		}
		select {
		case a.finished <- sum:
		default:
		}
	case *leaveRequest:
		sum := a.summary(a.applied, a.gen)
		sum.Left = true
		c.Respond(sum)
	}
}

// checksum is the hash of the parameters this node holds (0: none yet).
func (a *agent) checksum() uint64 {
	if a.model == nil {
		return 0
	}
	return ddp.Checksum(a.model.Set.HostWeights())
}

// summary is this node's report at the end.
func (a *agent) summary(step int, gen uint64) *AgentSummary {
	stage := a.stage
	if a.rank < 0 {
		stage = -1
	}
	return &AgentSummary{Step: step, Generation: gen, Stage: stage, Checksum: fmt.Sprintf("%016x", a.checksum())}
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

// setStage makes this node hold the units of stage s: m when given (the
// whole model, built already), else a model of those units built from the
// seed (or --init). Its state is then the seed's until a sync replaces it.
func (a *agent) setStage(s int, m *nn.Model) error {
	if m == nil {
		var err error
		if m, err = buildUnits(a.cfg, a.be, a.spec, a.cuts[s].Lo, a.cuts[s].Hi); err != nil {
			return err
		}
	}
	opt, err := optim.New(m.Set, a.cfg.Optim)
	if err != nil {
		return err
	}
	a.model, a.opt, a.rep, a.stage = m, opt, replica.New(m, opt), s
	for _, b := range a.undo.bufs {
		a.be.Free(b) // the copies of the stage held before
	}
	a.undo = undoState{}
	return nil
}

// stateBufs are the buffers that make up the stage's training state: its
// weights and its optimizer state.
func (a *agent) stateBufs() []kernels.Buffer {
	bufs := []kernels.Buffer{a.model.Set.Weights()}
	for _, st := range a.opt.States() {
		bufs = append(bufs, st.Buf)
	}
	return bufs
}

// keepUndo copies the stage's state before a step (pipeline stages only).
func (a *agent) keepUndo() {
	bufs := a.stateBufs()
	if len(a.undo.bufs) != len(bufs) {
		for _, b := range a.undo.bufs {
			a.be.Free(b)
		}
		a.undo.bufs = make([]kernels.Buffer, len(bufs))
		for i, b := range bufs {
			a.undo.bufs[i] = a.be.Alloc(b.Len())
		}
	}
	for i, b := range bufs {
		a.be.Copy(a.undo.bufs[i], b)
	}
	a.undo.applied, a.undo.cursor = a.applied, a.cursor
}

// rollBack goes back to the state from before the last step.
func (a *agent) rollBack() error {
	if !a.undo.valid || a.model == nil {
		return fmt.Errorf("asked to undo step %d, but this node holds no state from before it", a.applied)
	}
	for i, b := range a.stateBufs() {
		a.be.Copy(b, a.undo.bufs[i])
	}
	a.log.Info("torn step undone", zap.Int("from_step", a.applied), zap.Int("to_step", a.undo.applied))
	a.applied, a.cursor, a.undo.valid = a.undo.applied, a.undo.cursor, false
	return nil
}

// sync joins generation m.Generation: its slot (a grid rank and a stage,
// or standby), a communicator among the grid's members, and the stage's
// state from m.Root (the most advanced replica holding it), from the
// checkpoint (a lost stage), or from the seed (nothing trained yet).
func (a *agent) sync(m *actorspb.AgentSync) error {
	a.closeComm()
	a.gen, a.world0 = m.Generation, int(m.World0)
	if m.RollBack {
		if err := a.rollBack(); err != nil {
			return err
		}
	}
	a.undo.valid = false // every member starts the generation at m.Step
	if a.applied > int(m.Step) {
		// State ahead of the generation (a torn step this node could not
		// undo, or steps past the checkpoint a lost stage restarts from)
		// is dropped: this node holds nothing until it syncs a stage.
		a.held, a.applied, a.cursor = -1, 0, 0
	}
	if m.Standby {
		a.rank = -1
		return nil
	}
	st := int(m.Stage)
	if st < 0 || st >= len(a.cuts) {
		return fmt.Errorf("stage %d of a %d-stage cut", st, len(a.cuts))
	}
	if a.model == nil || a.stage != st || m.Fresh {
		if err := a.setStage(st, nil); err != nil {
			return err
		}
		a.held = -1
	}
	d, p := int(m.Replicas), int(m.Stages)
	grid, err := pipeline.NewGrid(d, p)
	if err != nil {
		return err
	}
	cc := commConfig(a.cfg, a.log)
	cc.World = fmt.Sprintf("gen%d", m.Generation)
	comm, err := actors.StartRemote(a.sys, actors.RemoteWorld{Rank: int(m.Rank), Addrs: m.Addrs}, cc)
	if err != nil {
		return err
	}
	a.comm, a.rank = comm, int(m.Rank)
	switch {
	case m.FromCheckpoint:
		ck := *a.cfg
		ck.ResumeFrom = int64(m.CheckpointStep)
		if err := restore(&ck, a.model, a.opt); err != nil {
			a.closeComm()
			return err
		}
	case m.Root >= 0:
		if err := a.receiveState(grid, int(m.Root)); err != nil {
			a.closeComm()
			return err
		}
	}
	a.applied, a.cursor, a.held = int(m.Step), data.Cursor(m.Cursor), st
	a.opt.SetSteps(int(m.Step))
	if a.sched == nil {
		a.worker, err = ddp.NewWorker(ddp.WorkerConfig{
			Rank: a.rank, World: d, Replica: a.rep, Comm: comm,
			Train: a.train, Test: a.test, Shuffle: a.cfg.Shuffle, Seed: a.cfg.Seed,
			BucketBytes: int64(a.cfg.BucketMB * (1 << 20)), ClipNorm: a.cfg.ClipNorm,
		})
	} else {
		a.worker, err = stage.NewWorker(stage.Config{
			Grid: grid, Rank: a.rank, Schedule: a.sched, Model: a.model, Opt: a.opt, Comm: comm,
			Train: a.train, Test: a.test, Shuffle: a.cfg.Shuffle, Seed: a.cfg.Seed, ClipNorm: a.cfg.ClipNorm,
		})
	}
	if err != nil {
		a.closeComm()
		return err
	}
	return nil
}

// receiveState broadcasts the weights and optimizer state of this node's
// stage from grid rank root to every replica of the stage.
func (a *agent) receiveState(g pipeline.Grid, root int) error {
	_, st := g.Coords(a.rank)
	ranks := []int{root}
	for _, r := range g.DataGroup(st) {
		if r != root {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) == 1 {
		return nil
	}
	group, err := a.comm.Group(ranks)
	if err != nil {
		return err
	}
	defer group.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StepTimeout)
	defer cancel()
	for _, b := range a.stateBufs() {
		host := make([]float32, b.Len())
		a.be.Download(host, b)
		if err := group.Broadcast(ctx, host, 0).Wait(); err != nil {
			return fmt.Errorf("state of stage %d from rank %d: %w", st, root, err)
		}
		a.be.Upload(b, host)
	}
	return nil
}

// step runs one step of the current generation, bracketed by the
// membership's Hold and Release so that the world changes only between
// steps, and abortable by a failure signal.
func (a *agent) step(m *actorspb.RunStep) *actorspb.StepDone {
	done := &actorspb.StepDone{Generation: m.Generation, Step: m.Step, Rank: uint32(a.rank), Stage: uint32(a.stage)}
	switch {
	case a.worker == nil || m.Generation != a.gen:
		done.Error = fmt.Sprintf("this node has no slot in generation %d", m.Generation)
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
	if a.sched != nil {
		a.keepUndo()
	}
	res, err := a.worker.Step(ctx, ddp.StepRequest{Generation: m.Generation, Step: m.Step, Cursor: data.Cursor(m.Cursor),
		Batch: int(m.Batch), Accum: 1, LR: m.Lr, GlobalTargets: int(m.GlobalTargets), Checksum: m.Checksum})
	a.undo.valid = err == nil && a.sched != nil
	if err != nil {
		done.Error = err.Error()
		return done
	}
	a.applied, a.cursor = int(m.Step)+1, data.Cursor(m.Cursor)+data.Cursor(m.Batch)
	done.LossSum, done.Targets, done.Correct = res.LossSum, uint64(res.Targets), uint64(res.Correct)
	done.ComputeMs, done.CommMs, done.ExposedCommMs = res.ComputeMs, res.CommMs, res.ExposedMs
	done.GradNorm, done.Checksum, done.StepMs, done.ScheduleMs = res.GradNorm, res.Checksum, res.StepMs, res.ScheduleMs
	done.PeakMicroBatches, done.PeakActivationBytes = uint32(res.PeakMicro), res.PeakAct
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

// lead drives generation w from its leader: it lays the members out as D
// replicas of P stages keeping each on the stage it holds, gives every
// stage the state of its most advanced holder (or, for a lost stage, the
// latest checkpoint's), and runs steps until the target, the world's end
// (ctx) or a failed step.
func (a *agent) lead(ctx context.Context, w elastic.World) (bool, error) {
	cfg := a.cfg
	committed := time.Now()
	n := w.Size()
	pids := make([]*actor.PID, n)
	for i, m := range w.Members {
		pids[i] = actor.NewPID(m.ActorAddr, agentActorName)
	}
	// Two coordinators: one over every member (status, sync, finish), one
	// over the grid's ranks (steps, evaluation, weights, checkpoints).
	members, err := actors.SpawnCoordinator(a.sys, actors.CoordinatorConfig{
		Name: fmt.Sprintf("%s-gen%d-members", actors.CoordinatorActorName, w.Gen), Workers: pids, CallTimeout: cfg.StepTimeout,
	})
	if err != nil {
		return false, err
	}
	defer a.sys.Root().Stop(members)
	// When the world is superseded (ctx), every coordinator is told to give
	// up its call at once, so that a member that hangs without a reset does
	// not hold the leader. One watcher serves the whole generation.
	var coordMu sync.Mutex
	coords := []*actor.PID{members}
	cancel := func(coord *actor.PID) {
		a.sys.Root().Send(coord, &actors.CancelCall{Reason: "generation superseded"})
	}
	watched := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(watched)
		coordMu.Lock()
		defer coordMu.Unlock()
		for _, c := range coords {
			cancel(c)
		}
	})
	defer func() {
		if !stopWatch() {
			<-watched
		}
	}()
	// call asks a coordinator and waits for its answer. A world superseded
	// between the check and the request is caught by the second check: the
	// cancel then follows the request into the coordinator's mailbox.
	call := func(coord *actor.PID, msg any) (any, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := a.sys.Root().RequestFuture(coord, msg, cfg.StepTimeout+30*time.Second)
		if ctx.Err() != nil {
			cancel(coord)
		}
		return f.Result()
	}
	gather := func(msgs []any) ([]any, error) {
		res, err := call(members, &actors.GatherCall{Msgs: msgs})
		if err != nil {
			return nil, err
		}
		rep := res.(*actors.GatherReport)
		return rep.Replies, rep.Err
	}

	// 1. What does each member hold?
	msgs := make([]any, n)
	for i := range msgs {
		msgs[i] = &actorspb.AgentStatusRequest{Generation: w.Gen, Rank: uint32(i)}
	}
	replies, err := gather(msgs)
	if err != nil {
		return false, fmt.Errorf("status of generation %d: %w", w.Gen, err)
	}
	states := make([]memberState, n)
	world0 := 0
	for i, rep := range replies {
		st := rep.(*actorspb.AgentStatus)
		states[i] = memberState{Applied: int(st.AppliedStep), Cursor: data.Cursor(st.Cursor), Held: int(st.HeldStage),
			CanRollBack: st.CanRollBack}
		world0 = max(world0, int(st.World0))
	}
	P := len(a.cuts)
	gp, err := planGeneration(states, P)
	if err != nil {
		return false, fmt.Errorf("generation %d: %w", w.Gen, err)
	}
	if world0 == 0 {
		world0 = gp.D // the job's first world
	}
	var ckptStep int64
	if gp.FromCheckpoint || (gp.Fresh && cfg.Resume) {
		ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, cfg.CkptDir)
		switch {
		case gp.Fresh && errors.Is(err, checkpoint.ErrNoCheckpoint):
			// --resume with nothing to resume: from scratch.
		case err != nil && gp.FromCheckpoint:
			if cfg.CkptDir == "" {
				err = errors.New("the job has no --ckpt-dir")
			}
			return a.stageLost(w, gp, gather, err)
		case err != nil:
			return false, fmt.Errorf("generation %d: --resume: %w", w.Gen, err)
		default:
			ckptStep = ck.Manifest.Step
			if ck.Manifest.Sampler == nil {
				ck.Close()
				return false, fmt.Errorf("generation %d: checkpoint step %d has no sampler state", w.Gen, ckptStep)
			}
			gp.Step, gp.Cursor, gp.Fresh, gp.FromCheckpoint = int(ckptStep), ck.Manifest.Sampler.Cursor, false, true
			ck.Close()
		}
	}

	// 2. Form the generation.
	addrs := make([]string, len(gp.Members))
	grid := make([]*actor.PID, len(gp.Members))
	for rank, i := range gp.Members {
		addrs[rank], grid[rank] = w.Members[i].ActorAddr, pids[i]
	}
	for i := range msgs {
		sync := &actorspb.AgentSync{Generation: w.Gen, Addrs: addrs, Step: uint64(gp.Step), Cursor: uint64(gp.Cursor),
			World0: uint32(world0), Replicas: uint32(gp.D), Stages: uint32(gp.P), Fresh: gp.Fresh,
			FromCheckpoint: gp.FromCheckpoint, CheckpointStep: uint64(ckptStep), Root: -1, Member: uint32(i),
			RollBack: gp.RollBack[i]}
		if gp.Rank[i] < 0 {
			sync.Standby = true
		} else {
			sync.Rank, sync.Stage = uint32(gp.Rank[i]), uint32(gp.Stage[i])
			if !gp.FromCheckpoint {
				sync.Root = int32(gp.Roots[gp.Stage[i]])
			}
		}
		msgs[i] = sync
	}
	if _, err = gather(msgs); err != nil {
		return false, fmt.Errorf("forming generation %d: %w", w.Gen, err)
	}
	a.lostSince = time.Time{}
	standby := []string{}
	for i, r := range gp.Rank {
		if r < 0 {
			standby = append(standby, w.Members[i].Name)
		}
	}
	source := "surviving replicas"
	switch {
	case gp.Fresh:
		source = "seed"
	case gp.FromCheckpoint:
		source = fmt.Sprintf("checkpoint step %d", ckptStep)
	}
	a.log.Info("generation formed", zap.Uint64("generation", w.Gen), zap.Strings("members", memberNames(w)),
		zap.String("reason", w.Reason), zap.Int("replicas", gp.D), zap.Int("stages", gp.P), zap.Strings("standby", standby),
		zap.Int("step", gp.Step), zap.String("state_from", source), zap.Duration("sync", time.Since(committed)))

	g, err := pipeline.NewGrid(gp.D, gp.P)
	if err != nil {
		return false, err
	}
	evalRanks := []int{0}
	if gp.P > 1 {
		evalRanks = g.PipelineGroup(0)
	}
	steps, err := actors.SpawnCoordinator(a.sys, actors.CoordinatorConfig{
		Name: fmt.Sprintf("%s-gen%d", actors.CoordinatorActorName, w.Gen), Workers: grid, CallTimeout: cfg.StepTimeout,
		EvalRanks: evalRanks,
	})
	if err != nil {
		return false, err
	}
	defer a.sys.Root().Stop(steps)
	coordMu.Lock()
	coords = append(coords, steps)
	coordMu.Unlock()

	// 3. Train.
	target := cfg.Steps
	if cfg.Epochs > 0 {
		target = int(math.Ceil(cfg.Epochs * float64(a.train.Len()) / float64(cfg.Batch)))
	}
	batch, lrScale := cfg.Batch, 1.0
	if a.ac.Rescale == "linear-lr" {
		per := max(1, cfg.Batch/world0)
		batch, lrScale = per*gp.D, optim.LinearScaling(1, world0, gp.D)
	}
	if per := batch / gp.D; gp.P > 1 && per < cfg.MicroBatches {
		return false, fmt.Errorf("generation %d: %d rows per replica cannot make %d micro-batches", w.Gen, per, cfg.MicroBatches)
	}
	sched := cfg.schedule(target)
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
	step, cursor := gp.Step, gp.Cursor
	for ; step < target; step++ {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		t0 := time.Now()
		idx = sampler.At(cursor, batch, idx)
		a.train.Fill(idx, &b)
		check := cfg.CheckEvery > 0 && (step+1)%cfg.CheckEvery == 0
		req := &actorspb.RunStep{Generation: w.Gen, Step: uint64(step), Cursor: uint64(cursor), Batch: uint32(batch), Accum: 1,
			Lr: sched.LR(step) * lrScale, GlobalTargets: uint64(globalTargets(&b)), Checksum: check, World: uint32(g.Size())}
		res, err := call(steps, &actors.StepCall{Req: req})
		if err != nil {
			return false, err
		}
		rep := res.(*actors.StepReport)
		if rep.Err != nil {
			return false, fmt.Errorf("generation %d, step %d: %w", w.Gen, step+1, rep.Err)
		}
		st, err := aggregateStep(g, gp.P > 1, rep.Dones, step, check)
		if err != nil {
			return false, err
		}
		stepMs := ms(time.Since(t0))
		m := StepMetrics{Step: step + 1, LR: req.Lr, World: g.Size(), Generation: w.Gen, DP: gp.D, PP: gp.P,
			Micro: cfg.MicroBatches, Accum: 1, StepMs: stepMs,
			Loss: st.LossSum / math.Max(1, float64(st.Targets)), GradNorm: st.GradNorm,
			ComputeMs: st.ComputeMs, CommMs: st.CommMs, BubbleMs: st.BubbleMs, OverlapFraction: st.Overlap,
			PeakActBytes: st.PeakAct, PeakMicro: st.PeakMicro, BubbleFraction: st.BubbleFraction}
		if gp.P > 1 {
			m.FormulaBubble = pipeline.FormulaBubble(gp.P, cfg.MicroBatches)
		}
		m.SamplesPerS = float64(batch) / (stepMs / 1e3)
		if ctxLen := cfg.Context; cfg.Model == "gpt" {
			m.TokensPerS = m.SamplesPerS * float64(ctxLen)
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
			meta.World.DP, meta.World.PP = gp.D, gp.P
			pause, err := ckpt.save(callShards(func(m any) (any, error) { return call(steps, m) }), meta)
			if err != nil {
				return false, err
			}
			m.CkptPauseMs = ms(pause)
		}
		if a.test != nil && (step+1 == target || (cfg.EvalEvery > 0 && (step+1)%cfg.EvalEvery == 0)) {
			el, ea, err := evaluate(cfg, a.test.Len(), func(lo, hi int) (replica.Result, error) {
				return evalCall(func(m any) (any, error) { return call(steps, m) }, lo, hi)
			})
			if err != nil {
				return false, fmt.Errorf("generation %d: evaluating after step %d: %w", w.Gen, step+1, err)
			}
			fields := []zap.Field{zap.Uint64("generation", w.Gen), zap.Int("step", step+1), zap.Float64("eval_loss", el)}
			m.EvalLoss = el
			if a.spec.MLP != nil {
				m.EvalAcc = ea
				fields = append(fields, zap.Float64("eval_accuracy", ea))
			}
			a.log.Info("eval", fields...)
		}
		if mw != nil {
			if err := mw.write(m); err != nil {
				return false, err
			}
		}
		if (step+1)%cfg.LogEvery == 0 {
			a.log.Info("step", zap.Uint64("generation", w.Gen), zap.Int("step", step+1), zap.Int("of", target),
				zap.Float64("loss", m.Loss), zap.Int("replicas", gp.D), zap.Int("stages", gp.P), zap.Float64("step_ms", stepMs))
		}
	}

	// 4. The job is done: the whole model is saved if asked, then every
	// member reports its checksum, equal within each stage.
	if cfg.Save != "" {
		res, err := call(steps, &actors.WeightsCall{})
		if err != nil {
			return false, err
		}
		if rep := res.(*actors.WeightsReport); rep.Err != nil {
			return false, rep.Err
		} else if err := a.saveWeights(rep.Weights, step); err != nil {
			return false, err
		}
	}
	finish := make([]any, n)
	for i := range finish {
		finish[i] = &actorspb.AgentFinish{Generation: w.Gen, Step: uint64(step), Rank: uint32(i)}
	}
	replies, err = gather(finish)
	// The members exit once they answered: stop watching them first.
	_ = a.sys.Root().StopFuture(steps).Wait()
	_ = a.sys.Root().StopFuture(members).Wait()
	if err != nil {
		return false, fmt.Errorf("finishing: %w", err)
	}
	for i, rep := range replies {
		r := gp.Rank[i]
		if r < 0 {
			continue
		}
		peer := gp.Members[r-r%gp.D]
		if c := rep.(*actorspb.AgentFinished).Checksum; c != replies[peer].(*actorspb.AgentFinished).Checksum {
			return true, fmt.Errorf("%w: at the end rank %d's parameters differ from rank %d's, the same stage", ErrDiverged, r, r-r%gp.D)
		}
	}
	a.log.Info("job finished", zap.Int("step", step), zap.Uint64("generation", w.Gen), zap.Int("replicas", gp.D), zap.Int("stages", gp.P))
	return true, nil
}

// stageLost answers a generation in which a pipeline stage has no holder
// at the newest step and the latest checkpoint cannot restore it (cause).
// Until AgentConfig.LostStageTimeout has passed since the leader first saw
// it, the generation fails and the next one looks again (a holder may come
// back); then every member is told to end the job with the error.
func (a *agent) stageLost(w elastic.World, gp genPlan, gather func([]any) ([]any, error), cause error) (bool, error) {
	if a.lostSince.IsZero() {
		a.lostSince = time.Now()
	}
	waited := time.Since(a.lostSince)
	what := fmt.Sprintf("pipeline stage %s: no member holds its state at step %d, and the latest checkpoint cannot restore it (%v)",
		joinInts(gp.Lost), gp.Step, cause)
	if waited < a.ac.LostStageTimeout {
		a.log.Error("a pipeline stage is lost; waiting for a member that holds it", zap.Uint64("generation", w.Gen),
			zap.Ints("stages", gp.Lost), zap.Duration("waited", waited), zap.Duration("lost_stage_timeout", a.ac.LostStageTimeout),
			zap.Error(cause))
		return false, fmt.Errorf("generation %d: %s", w.Gen, what)
	}
	what = fmt.Sprintf("%s; no member holding it came back within %s (--lost-stage-timeout)", what, waited.Round(time.Millisecond))
	msgs := make([]any, w.Size())
	for i := range msgs {
		msgs[i] = &actorspb.AgentFinish{Generation: w.Gen, Step: uint64(gp.Step), Rank: uint32(i), Error: what}
	}
	// Best effort: a member that does not answer is gone or failing too.
	if _, err := gather(msgs); err != nil {
		a.log.Warn("telling the members to end the job", zap.Error(err))
	}
	return true, fmt.Errorf("%w: %s", ErrStageLost, what)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// saveWeights writes the whole model's weights (the stages' in order) to
// --save.
func (a *agent) saveWeights(w []float32, step int) error {
	whole, err := nn.Build(cpu.New(1), a.spec, a.cfg.Seed, 0, a.spec.Units())
	if err != nil {
		return err
	}
	if err := whole.Set.SetHostWeights(w); err != nil {
		return err
	}
	return whole.Set.SaveWeights(a.cfg.Save, map[string]string{"format": "pt", "step": fmt.Sprint(step)})
}
