package leader

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// Phase is where the leader of a generation stands.
type Phase uint8

const (
	// PhaseIdle: not leading, or waiting for the next world.
	PhaseIdle Phase = iota
	// PhaseStatus: every member was asked what it holds.
	PhaseStatus
	// PhaseForm: every member was told its place and where its state comes
	// from.
	PhaseForm
	// PhaseTrain: the step loop runs.
	PhaseTrain
	// PhaseVerify: every member was asked for its checksum at the end.
	PhaseVerify
	// PhaseFinish: every member was told that the job ended (or failed).
	PhaseFinish
	// PhaseDone: the job ended; the core takes nothing more.
	PhaseDone
)

func (p Phase) String() string {
	return [...]string{"idle", "status", "form", "train", "verify", "finish", "done"}[p]
}

// Config is what the leader core needs of the job.
type Config struct {
	// PP is the pipeline depth (train.Config.PP), TP the tensor-parallel
	// shards of each stage (train.Config.TP; 0: 1); MicroBatches each
	// replica's micro-batches (pipelines and ZeRO-3 need a row per micro-batch).
	PP, TP, MicroBatches int
	// ZeroGroup is the ZeRO shard group size (0: no ZeRO), ZeroShards the
	// same at stage 3 (0 below): replicas of a ZeRO-3 shard group hold
	// different weights, compared shard by shard.
	ZeroGroup, ZeroShards int
	// Batch is the global batch (under LinearLR: the first world's).
	Batch    int
	LinearLR bool
	// Resume starts a fresh job from the latest checkpoint;
	// ResumeRequired ends it when there is none.
	Resume, ResumeRequired bool
	// Rounds: the replicas synchronise in rounds (local SGD, DiLoCo) and
	// differ between them, so a generation formed mid-round is not
	// checked for divergence (the end is: the last step ends a round).
	Rounds bool
	// Async: asynchronous training (Sync async). Every member is a replica,
	// a world of one of its own; the leader's node holds the parameter
	// servers (the shell's), which continue from the servers this node
	// kept (KeepServers), else from the latest checkpoint, else, when the
	// job has not trained, from the seed. Replicas differ by design: no
	// checksum is compared.
	Async bool
	// Target is the job's last step.
	Target int
	// LostStageTimeout is how long a stage that no member holds and no
	// checkpoint restores is waited for; RetryDelay how long after a
	// transient failure the leader asks for a new generation when the
	// membership did not change. The delay doubles with each transient
	// failure in a row, up to 16 × RetryDelay (backoff); a step trained
	// resets it (Progress).
	LostStageTimeout, RetryDelay time.Duration
	// MaxRestarts bounds the transient failures this node's leader core
	// restarts from (torchrun's --max-restarts): the next one ends the job
	// with ErrRestarts. 0: no bound.
	MaxRestarts int
	// RdzvTimeout: a node that the membership keeps waiting (too few
	// nodes, no quorum) for this long without a world to train in ends
	// with ErrRendezvousTimeout (torchrun's --rdzv-timeout). 0: no bound.
	RdzvTimeout time.Duration
}

// Checkpoint is the latest checkpoint as the leader found it: its step and
// sampler cursor, or why there is none (Err wraps checkpoint.
// ErrNoCheckpoint when the directory holds none).
type Checkpoint struct {
	Step   int
	Cursor data.Cursor
	Err    error
}

// Call asks the shell to send Msgs[i] to member i (nil: none) of
// generation Gen and to report the replies with Core.Replies.
type Call struct {
	Gen   uint64
	Phase Phase
	Msgs  []any
}

// ServerState is where the parameter servers this node kept from the
// generation it led stand (Async): their updates and the sampler's cursor
// after them.
type ServerState struct {
	Step   int
	Cursor data.Cursor
}

// TrainOrder asks the shell to run the step loop of generation Gen on its
// members' workers, and to report its end with Core.Trained. Under
// Async, Layout.Source is where the parameter servers' state comes from:
// FromReplica the servers the shell kept, else a checkpoint or the seed.
type TrainOrder struct {
	Gen     uint64
	Layout  Layout
	Batch   int
	LRScale float64
	// Members and Standby name the members with a place in the mesh (by
	// rank) and those without; StateFrom says where the state comes from
	// ("seed", "checkpoint step N", "surviving replicas", "the parameter
	// servers"). With Gen and Layout they describe the generation
	// (train.WorldInfo).
	Members, Standby []string
	StateFrom        string
}

// Out is one thing the shell does for the core, in order.
type Out struct {
	Call  *Call
	Train *TrainOrder
	// Stop is the generation whose step loop stops (superseded); 0: none.
	Stop uint64
	// Request: ask the membership for a new generation, for this reason.
	Request string
	// Wait: the leader waits (no generation runs), for this reason.
	Wait string
	// Done: the job ended on every member; Err says why when it failed.
	Done bool
	Err  error
}

// Core is the elastic trainer protocol of one node, a pure state
// machine like the rendezvous core (package elastic): no goroutines, clock
// or I/O. Every committed world goes in (commit); on the world's leader
// (its rank 0) the core asks every member what it holds (status), lays
// the generation out (planLayout: who holds which stage, and where each
// stage's state comes from: the seed, a surviving replica, a checkpoint),
// tells every member its place (form), has the shell run the step loop
// (train), and at the target asks every member for its checksum (verify)
// before telling them the job ended (finish). The members' replies, the
// loop's end and clock ticks go in; calls to send and decisions come out
// (ready).
//
// Failures are classified: a transient one (a member lost or silent, a
// timeout, an abort) waits for the next generation, asking for one after
// RetryDelay when the membership does not change; a permanent one (an
// output that cannot be written, a world too small for the job, diverged
// replicas, bad data, a stage lost for longer than LostStageTimeout) ends
// the job on every member, which exits naming it.
//
// train's agent (troupe agent) is its shell in a real job; the simulator (package sim) drives
// the same core over a simulated network and clock.
type Core struct {
	cfg   Config
	now   time.Time
	phase Phase
	world elastic.World
	lead  bool
	ckpt  Checkpoint
	// states are the members' holdings (status), lay the generation's
	// layout; world0 is the job's first data-parallel size.
	states []worker.Holding
	lay    Layout
	world0 int
	// jobStep is the last step the job trained as far as any member
	// reported (Status.job_step): with no member holding any state, it
	// tells a lost job from a new one.
	jobStep int
	// lostSince is when a lost stage was first seen (zero: none lost).
	lostSince time.Time
	// retryAt is when to ask for a new generation (zero: never), and why;
	// restarts counts the transient failures restarted from, inARow those
	// since the last step trained (the backoff's exponent).
	retryAt     time.Time
	retryReason string
	restarts    int
	inARow      int
	// waitingSince is since when the membership keeps this node waiting
	// (zero: it does not), and why.
	waitingSince time.Time
	waitingWhy   string
	// endErr is why the job ends (finish phase; nil: it reached Target).
	endErr error
	out    []Out
	// servers is what this node's parameter servers hold (Async; nil:
	// none kept).
	servers *ServerState
}

// KeepServers says that this node holds parameter servers at s (Async),
// which the next generation it leads continues from; nil: none.
func (c *Core) KeepServers(s *ServerState) { c.servers = s }

// New is a leader core for the job cfg, its clock at now.
func New(cfg Config, now time.Time) *Core {
	return &Core{cfg: cfg, now: now}
}

// Waiting: the membership keeps this node out of any world, for reason
// (elastic.EventWaiting: too few nodes, no quorum); "" when it no longer
// does, as a committed world says too. After RdzvTimeout of it the job
// ends here with ErrRendezvousTimeout.
func (c *Core) Waiting(reason string) {
	switch {
	case reason == "":
		c.waitingSince, c.waitingWhy = time.Time{}, ""
	case c.waitingSince.IsZero():
		c.waitingSince, c.waitingWhy = c.now, reason
	default:
		c.waitingWhy = reason
	}
}

// Progress: a step of the current generation was trained; the restart
// backoff starts again from RetryDelay.
func (c *Core) Progress() { c.inARow = 0 }

// Ready hands out what the core wants done, in order.
func (c *Core) Ready() []Out {
	out := c.out
	c.out = nil
	return out
}

// Commit takes world w, committed by the membership; lead says whether
// this node is its rank 0, and ck is the latest checkpoint.
func (c *Core) Commit(w elastic.World, lead bool, ck Checkpoint) {
	if c.phase == PhaseDone {
		return
	}
	if c.phase == PhaseTrain {
		c.out = append(c.out, Out{Stop: c.world.Gen})
	}
	c.phase, c.world, c.lead, c.ckpt, c.retryAt = PhaseIdle, w, lead, ck, time.Time{}
	c.waitingSince, c.waitingWhy = time.Time{}, ""
	if !lead {
		return
	}
	c.phase = PhaseStatus
	sums := c.replicatedShards()
	c.call(func(i int) any { return &workerpb.StatusRequest{Peer: uint32(i), Checksum: sums} })
}

// call asks the shell to send mk(i) to every member i.
func (c *Core) call(mk func(i int) any) {
	msgs := make([]any, c.world.Size())
	for i := range msgs {
		msgs[i] = mk(i)
	}
	c.out = append(c.out, Out{Call: &Call{Gen: c.world.Gen, Phase: c.phase, Msgs: msgs}})
}

// Tick moves the core's clock.
func (c *Core) Tick(now time.Time) {
	c.now = now
	if c.cfg.RdzvTimeout > 0 && !c.waitingSince.IsZero() && now.Sub(c.waitingSince) >= c.cfg.RdzvTimeout && c.phase != PhaseDone {
		c.phase = PhaseDone
		c.out = append(c.out, Out{Done: true, Err: fmt.Errorf("%w: waited %s (--rdzv-timeout): %s", ErrRendezvousTimeout, now.Sub(c.waitingSince).Round(time.Second), c.waitingWhy)})
		return
	}
	if c.phase == PhaseIdle && !c.retryAt.IsZero() && !now.Before(c.retryAt) {
		c.retryAt = time.Time{}
		c.out = append(c.out, Out{Request: c.retryReason})
	}
}

// Replies takes the answers to the call of generation gen in phase ph, or
// the call's failure. Answers to a call the core has moved on from are
// ignored.
func (c *Core) Replies(gen uint64, ph Phase, replies []any, err error) {
	if gen != c.world.Gen || ph != c.phase || !c.lead {
		return
	}
	if err != nil && c.phase != PhaseFinish {
		if c.phase == PhaseForm && errors.Is(err, worker.ErrNoState) {
			// A member no longer holds what its status reported: a step of
			// the previous generation's loop reached it after it answered
			// (the old leader had not yet seen the new world), and it
			// applied it. The layout is stale, not the job's state lost:
			// plan again from fresh statuses (a torn step is undone then).
			err = failure.Wrapf(failure.Stale, "the layout is stale: %w", err)
		}
		c.fail(fmt.Errorf("generation %d, %s: %w", gen, ph, err))
		return
	}
	switch c.phase {
	case PhaseStatus:
		c.states = make([]worker.Holding, len(replies))
		sums, undoSums := make([]uint64, len(replies)), make([]uint64, len(replies))
		for i, r := range replies {
			st := r.(*workerpb.Status)
			sums[i], undoSums[i] = st.Checksum, st.UndoChecksum
			c.states[i] = worker.Holding{Part: int(st.HeldPart), Applied: int(st.Applied), Cursor: data.Cursor(st.Cursor),
				Undo: st.CanRollBack, World0: int(st.World0), ZeroGroup: int(st.HeldZeroGroup), ZeroShard: int(st.HeldZeroShard)}
			c.world0 = max(c.world0, int(st.World0))
			c.jobStep = max(c.jobStep, int(st.JobStep))
		}
		if c.replicatedShards() {
			slots := mesh.Mesh{PP: c.cfg.PP, TP: max(1, c.cfg.TP)}.Slots(c.cfg.ZeroGroup) // planLayout's
			c.states = oneLineage(c.states, sums, undoSums, c.cfg.ZeroGroup, slots)
		}
		c.plan()
	case PhaseForm:
		if c.cfg.Rounds || c.cfg.Async {
			c.startTraining()
			return
		}
		if err := c.checkReplicas(replies, func(r any) uint64 { return r.(*workerpb.Formed).Checksum }, c.lay.Step); err != nil {
			c.end(err)
			return
		}
		c.startTraining()
	case PhaseVerify:
		if err := c.checkReplicas(replies, func(r any) uint64 { return r.(*workerpb.Status).Checksum }, c.cfg.Target); err != nil {
			c.end(err)
			return
		}
		c.end(nil)
	case PhaseFinish:
		// Best effort: a member that does not answer is gone, or failing too.
		c.phase = PhaseDone
		c.out = append(c.out, Out{Done: true, Err: c.endErr})
	}
}

// startTraining has the shell run the generation's step loop.
func (c *Core) startTraining() {
	l := c.lay
	batch, scale := c.cfg.Batch, 1.0
	if c.cfg.LinearLR {
		per := max(1, c.cfg.Batch/c.world0)
		batch, scale = per*l.Mesh.DP, optim.LinearScaling(1, c.world0, l.Mesh.DP)
	}
	if c.rowPerMicro() && batch/l.Mesh.DP < c.cfg.MicroBatches {
		c.end(fmt.Errorf("%w: generation %d: %d rows per replica cannot make %d micro-batches", ErrWorldTooSmall, c.world.Gen, batch/l.Mesh.DP, c.cfg.MicroBatches))
		return
	}
	if l.Step >= c.cfg.Target {
		// The job reached its target before this leader took over.
		c.verify()
		return
	}
	if c.cfg.Async {
		batch, scale = c.cfg.Batch, 1 // a step is one whole batch, on one replica
	}
	o := &TrainOrder{Gen: c.world.Gen, Layout: l, Batch: batch, LRScale: scale, StateFrom: stateFrom(l, c.cfg.Async)}
	for i, m := range c.world.Members {
		if l.Rank[i] < 0 {
			o.Standby = append(o.Standby, m.Name)
		} else {
			o.Members = append(o.Members, m.Name)
		}
	}
	c.phase = PhaseTrain
	c.out = append(c.out, Out{Train: o})
}

// Trained takes the end of generation gen's step loop: nil when it reached
// the target.
func (c *Core) Trained(gen uint64, err error) {
	if gen != c.world.Gen || c.phase != PhaseTrain {
		return
	}
	if err != nil {
		c.fail(c.nameMembers(err))
		return
	}
	c.verify()
}

// verify asks every member for its checksum at the end (under Async,
// whose replicas differ by design, the job ends).
func (c *Core) verify() {
	if c.cfg.Async {
		c.end(nil)
		return
	}
	c.phase = PhaseVerify
	c.call(func(i int) any { return &workerpb.StatusRequest{Peer: uint32(i), Checksum: true} })
}

// fail classifies err: a transient failure waits for the next generation
// (asking for one after RetryDelay, doubled with each failure in a row up
// to 16 ×), and counts against MaxRestarts; a permanent one ends the job.
func (c *Core) fail(err error) {
	if !failure.Transient(err) {
		c.end(err)
		return
	}
	c.restarts++
	if c.cfg.MaxRestarts > 0 && c.restarts > c.cfg.MaxRestarts {
		c.end(fmt.Errorf("%w: %d transient failures, --max-restarts %d; the last: %v", ErrRestarts, c.restarts, c.cfg.MaxRestarts, err))
		return
	}
	delay := c.cfg.RetryDelay << min(c.inARow, 4)
	c.inARow++
	c.retry(err, delay)
}

// retry waits for the next generation, asking for one after delay when
// the membership does not change.
func (c *Core) retry(err error, delay time.Duration) {
	c.phase = PhaseIdle
	c.retryAt, c.retryReason = c.now.Add(delay), err.Error()
	c.out = append(c.out, Out{Wait: err.Error()})
}

// wait leaves the generation idle until the membership changes.
func (c *Core) wait(reason string) {
	c.phase = PhaseIdle
	c.out = append(c.out, Out{Wait: reason})
}

// Ended reports whether this core, leading, has decided the job's end
// (every member is being or was told), and why: nil when it reached its
// target with identical replicas.
func (c *Core) Ended() (bool, error) {
	if !c.lead || (c.phase != PhaseFinish && c.phase != PhaseDone) {
		return false, nil
	}
	return true, c.endErr
}

// end tells every member that the job ended, with err when it failed.
func (c *Core) end(err error) {
	c.phase, c.endErr = PhaseFinish, err
	step := uint64(c.cfg.Target)
	if err != nil {
		step = uint64(c.lay.Step)
	}
	f := workerpb.FailureOf(err)
	c.call(func(i int) any {
		return &workerpb.Finish{Peer: uint32(i), Generation: c.world.Gen, Step: step, Failure: f}
	})
}

// checkReplicas compares the checksums members report (sum of each reply)
// within every stage of the layout; a difference is a divergence naming
// the members.
func (c *Core) checkReplicas(replies []any, sum func(any) uint64, step int) error {
	l := c.lay
	err := CheckReplicas(l.Mesh, c.cfg.ZeroShards, step, func(r int) uint64 { return sum(replies[l.Members[r]]) })
	return c.nameMembers(err)
}

// nameMembers rewrites a divergence between ranks as one between the
// members that hold them.
func (c *Core) nameMembers(err error) error {
	var d *DivergedError
	if !errors.As(err, &d) || len(c.lay.Members) == 0 {
		return err
	}
	name := func(r int) string { return c.world.Members[c.lay.Members[r]].Name }
	return fmt.Errorf("%w: after step %d member %s (rank %d) holds other parameters than member %s (rank %d), the same model part",
		ErrDiverged, d.Step, name(d.Rank), d.Rank, name(d.Like), d.Like)
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
