package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/train/leader"

	"github.com/troupe-ml/troupe/elastic"
)

// Violation is the first broken invariant of a run.
type Violation struct {
	// At is the virtual time it was found (AtS in seconds, for JSON).
	At  time.Duration `json:"-"`
	AtS float64       `json:"at_s"`
	// Invariant names it (one of the Inv constants); Detail says how.
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s at %.3fs: %s", v.Invariant, v.At.Seconds(), v.Detail)
}

// The invariants, checked after every event and at the end.
const (
	// InvOneWorld: at most one committed world per generation, and a node's
	// generations only grow.
	InvOneWorld = "one-world-per-generation"
	// InvFormed: once a generation formed, every rank holds the same step
	// and the same bits (no step applied by one replica and not its peers).
	InvFormed = "replicas-agree-at-form"
	// InvStep: the replicas are bit-identical at every completed step, and
	// a completed step is never done again.
	InvStep = "replicas-identical-per-step"
	// InvSamples: every sample trained exactly once per epoch.
	InvSamples = "each-sample-once-per-epoch"
	// InvReference: the final weights equal the fault-free run's when every
	// step ran in a world of the fault-free run's size; otherwise every
	// step's loss is within LossTolerance of it.
	InvReference = "matches-fault-free-run"
	// InvEnds: the job ends, finishing or failing with a permanent error
	// the faults explain, within Config.Bound of virtual time; faults stop
	// at half of it.
	InvEnds = "job-ends"
	// InvCheckpoint: the latest checkpoint always opens, whole, as one a
	// save committed (after a torn write too), and a restore gives the
	// state saved.
	InvCheckpoint = "checkpoints-survive-torn-writes"
	// InvGoroutines: the run leaves no goroutine behind.
	InvGoroutines = "no-goroutine-leaked"
	// InvLive: while a world is the newest committed one and a strict
	// majority of it is alive and connected (up, not hung, not leaving, on
	// one side of any partition), some rank applies a step within
	// LivenessBound, until the job ends.
	InvLive = "majority-trains"
)

// LivenessBound is the longest a job may go without a step while a
// majority of its newest committed world is alive and connected: failure
// detection (1 s), a call's timeout (3 s) and the leader's retry (1 s) for
// each of a few generations, and the lost-stage timeout (20 s) during which
// a leader waits for a stage's hung or cut-off holder to come back, with a
// margin. A stall past it is a defect of the protocol, not of the faults.
const LivenessBound = time.Minute

// LossTolerance bounds the relative difference of a step's loss from the
// fault-free run's when the world had another size: the batch is split
// otherwise, so float32 sums run in another order. Measured: at most 6e-8
// over 5,000 seeds of the default job.
const LossTolerance = 1e-5

type checker struct {
	s       *sim
	worlds  map[uint64]elastic.World
	lastGen map[string]uint64
	// ckpts are the committed checkpoints by step (each part's state);
	// torn the state of the save torn at tornStep, committed if the
	// storage kept it.
	ckpts    map[int][]savedState
	torn     []savedState
	tornStep int
	// proposed is the newest world proposed.
	proposed elastic.World
	// firstApply is the first rank to apply each step of each generation,
	// by part: key generation, step, part.
	firstApply map[[3]uint64]rankStep
	// history is the trained steps of the replica that finished the job,
	// parts the same of each part (the checksums are the part's).
	history []applied
	parts   map[int][]applied
	// lossDiff is the largest relative difference of a step's loss from
	// the fault-free run's.
	lossDiff  float64
	violation *Violation
	// quietSince is since when the newest world (generation quietGen) has
	// had a live, connected majority and no step applied (-1: not now).
	quietSince time.Duration
	quietGen   uint64
}

func (c *checker) fail(inv, format string, args ...any) {
	if c.violation == nil {
		c.violation = &Violation{At: c.s.clk.now, AtS: c.s.clk.now.Seconds(), Invariant: inv, Detail: fmt.Sprintf(format, args...)}
		c.s.tracef("VIOLATION %s", c.violation)
	}
}

func (c *checker) committed(id string, w elastic.World) {
	if w.Gen <= c.lastGen[id] {
		c.fail(InvOneWorld, "%s committed %s after generation %d", id, w, c.lastGen[id])
		return
	}
	c.lastGen[id] = w.Gen
	if old, ok := c.worlds[w.Gen]; ok && !old.Equal(w) {
		c.fail(InvOneWorld, "two worlds for generation %d: %s (by %s) and %s (by %s, seen at %s)", w.Gen, old, old.Proposer, w, w.Proposer, id)
		return
	}
	c.worlds[w.Gen] = w
}

// latest is the newest committed world.
func (c *checker) latest() elastic.World {
	var w elastic.World
	for g, x := range c.worlds {
		if g > w.Gen {
			w = x
		}
	}
	return w
}

// ranksOf lists the workers formed in generation gen, by rank.
func (c *checker) ranksOf(gen uint64) []*member {
	var out []*member
	for _, id := range c.s.order {
		if n := c.s.nodes[id]; n.up && n.w.gen == gen && n.w.rank >= 0 {
			out = append(out, &n.w)
		}
	}
	slices.SortFunc(out, func(a, b *member) int { return a.rank - b.rank })
	return out
}

// formed: the leader of generation gen heard every member formed. Every
// rank holds the same step, each its part's state (as many values as the
// part has), and the replicas of a part hold the same bits.
func (c *checker) formed(leader *node, gen uint64) {
	ws := c.ranksOf(gen)
	if len(ws) == 0 {
		return // every rank crashed since it answered
	}
	first := map[int]*member{}
	for _, w := range ws {
		part := w.mesh.Slot(w.rank, c.s.cfg.zeroGroup())
		if c.s.cfg.Zero == 0 && c.s.partIdx != nil && len(w.params) != len(c.s.partIdx[part]) {
			c.fail(InvFormed, "generation %d formed with %s (rank %d, part %d) holding %d values, part %d has %d",
				gen, w.n.id, w.rank, part, len(w.params), part, len(c.s.partIdx[part]))
			return
		}
		f, ok := first[part]
		if !ok {
			first[part] = w
			f = w
		}
		if w.hold.Applied != ws[0].hold.Applied || w.stateSum() != f.stateSum() {
			c.fail(InvFormed, "generation %d formed with %s at step %d (slot %d, checksum %x) and %s at step %d (slot %d, checksum %x)",
				gen, f.n.id, f.hold.Applied, part, f.stateSum(), w.n.id, w.hold.Applied, part, w.stateSum())
			return
		}
	}
}

// applied: worker w applied step a of its generation. Every rank that
// applies the same step of the same generation must hold the same bits.
func (c *checker) applied(w *member, a applied) {
	c.progress()
	key := [3]uint64{w.gen, uint64(a.step), uint64(w.slot())}
	first, ok := c.firstApply[key]
	if !ok {
		c.firstApply[key] = rankStep{node: w.n.id, rank: w.rank, checksum: a.checksum}
		return
	}
	if first.checksum != a.checksum {
		c.fail(InvStep, "after step %d of generation %d rank %d (%s) holds checksum %x, rank %d (%s) %x, of part %d",
			a.step, w.gen, w.rank, w.n.id, a.checksum, first.rank, first.node, first.checksum, w.slot())
	}
}

// liveness runs after every event: while a strict majority of the newest
// committed world is alive and connected, a step must be applied within
// LivenessBound.
func (c *checker) liveness() {
	s := c.s
	if s.ended || c.violation != nil {
		c.quietSince = -1
		return
	}
	w := c.latest()
	if w.Gen == 0 || !c.majorityConnected(w) || c.liveMembers(w) < s.cfg.slots() {
		// (A majority of fewer members than one replica's slots trains
		// nothing: the rendezvous waits for more.)
		c.quietSince = -1
		return
	}
	if c.quietSince < 0 || w.Gen != c.quietGen {
		// The bound runs for one world: a newer one is the rendezvous'
		// progress (endless generations without a step break job-ends
		// once the faults stop).
		c.quietSince, c.quietGen = s.clk.now, w.Gen
		return
	}
	if s.clk.now-c.quietSince > LivenessBound {
		var alive []string
		for _, m := range w.Members {
			if n := s.nodes[m.ID]; n != nil && n.up && !n.hung && !n.left {
				alive = append(alive, fmt.Sprintf("%s (committed gen %d)", m.ID, n.core.Committed().Gen))
			}
		}
		c.fail(InvLive, "no step for %s although a majority of %s is alive and connected: %s",
			s.clk.now-c.quietSince, w, strings.Join(alive, ", "))
	}
}

// liveMembers counts w's members that are up, not hung and not leaving.
func (c *checker) liveMembers(w elastic.World) int {
	k := 0
	for _, m := range w.Members {
		if n := c.s.nodes[m.ID]; n != nil && n.up && !n.hung && !n.left {
			k++
		}
	}
	return k
}

// progress: a rank applied a step.
func (c *checker) progress() {
	if c.quietSince >= 0 {
		c.quietSince = c.s.clk.now
	}
}

// majorityConnected reports whether a strict majority of w's members is
// up, not hung, not leaving, and on one side of any partition.
func (c *checker) majorityConnected(w elastic.World) bool {
	sides := map[int]int{}
	for _, m := range w.Members {
		if n := c.s.nodes[m.ID]; n != nil && n.up && !n.hung && !n.left {
			sides[c.s.side[n.name]]++
		}
	}
	for _, k := range sides {
		if 2*k > w.Size() {
			return true
		}
	}
	return false
}

// rankStep is one rank's application of a step.
type rankStep struct {
	node     string
	rank     int
	checksum uint64
}

// finished: node n ended with err (the job's end as it saw it).
func (c *checker) finished(n *node, err error) {
	s := c.s
	if !s.ended {
		s.ended, s.endAt, s.result = true, s.clk.now, err
	}
	if err == nil {
		// The trained replica: the ranks of the generation that ended the
		// job (its leader verified them at the target), whether or not
		// their Finish arrived; not a standby's stale state.
		for _, id := range s.order {
			o := s.nodes[id]
			p := o.w.slot()
			if o.w.gen != n.world.Gen || o.w.rank < 0 || p < 0 {
				continue
			}
			if c.history == nil {
				c.history = slices.Clone(o.w.history)
			}
			if _, ok := c.parts[p]; !ok {
				c.parts[p] = slices.Clone(o.w.history)
			}
		}
	}
	if err != nil && !expectedFailure(err) {
		c.fail(InvEnds, "%s: the job failed: %v", n.id, err)
	}
}

// noQuorum reports whether no live node's committed world has a strict
// majority of its members alive, with the newest of those worlds.
func (c *checker) noQuorum() (elastic.World, bool) {
	var newest elastic.World
	for _, n := range c.s.live() {
		w := n.core.Committed()
		if w.Gen == 0 || c.quorumAlive(w) {
			return elastic.World{}, false
		}
		if w.Gen > newest.Gen {
			newest = w
		}
	}
	return newest, newest.Gen > 0
}

// quorumAlive reports whether a strict majority of w's members is alive.
func (c *checker) quorumAlive(w elastic.World) bool {
	k := 0
	for _, m := range w.Members {
		if n := c.s.nodes[m.ID]; n != nil && n.up && !n.left {
			k++
		}
	}
	return 2*k > w.Size()
}

// expectedFailure: the permanent failures faults can cause without a
// defect: every replica of a part lost before the first checkpoint (or in
// a job that keeps none), as the leader core decides it (ErrStageLost). A
// failure that crossed the wire (a member's Finish) matches every error of
// its class, state-lost, so the leader's message is required too: a
// worker's own state-lost error (worker.ErrNoState: asked to serve a state
// it does not hold) is a defect.
func expectedFailure(err error) bool {
	return errors.Is(err, leader.ErrStageLost) && strings.Contains(err.Error(), leader.ErrStageLost.Error())
}

// final checks the end of a run against the fault-free reference.
func (c *checker) final(ref *reference) {
	s := c.s
	if c.violation != nil {
		return
	}
	if !s.ended {
		if w, ok := c.noQuorum(); ok {
			// No live node's committed world has a live majority: the
			// rendezvous waits for its dead members, as its strict-majority
			// rule must (docs/SIM.md says how the faults get there).
			s.stalled = w
			return
		}
		if live := len(s.healthy()); live < s.cfg.MinNodes {
			// Fewer nodes live than the rendezvous' smallest world (a
			// replica's slots): leaves and crashes took them past the
			// joins the faults bring, and the rendezvous waits for more,
			// by design.
			s.short = live
			return
		}
		c.fail(InvEnds, "the job did not end within %s of virtual time (%d steps run)", s.cfg.Bound, s.stepsRun)
		return
	}
	if s.result != nil {
		return // an expected permanent failure: nothing trained to compare
	}
	// The trained steps, epoch by epoch: each step continues where the one
	// before ended, and its ranks' shards train every sample of an epoch
	// once.
	h := c.history
	if len(h) != s.cfg.Steps {
		c.fail(InvSamples, "the job finished with %d steps trained, want %d", len(h), s.cfg.Steps)
		return
	}
	n := s.cfg.Samples
	seen := make([]int, n)
	epoch := 0
	for step, a := range h {
		if a.step != step || a.cursor != uint64(step*s.cfg.Batch) {
			c.fail(InvSamples, "step %d of the finished replica is step %d at cursor %d, want cursor %d", step, a.step, a.cursor, step*s.cfg.Batch)
			return
		}
		if e := step * s.cfg.Batch / n; e != epoch {
			clear(seen)
			epoch = e
		}
		count := 0
		for r := range a.ranks {
			for _, i := range s.sampler.Shard(data.Cursor(a.cursor), s.cfg.Batch, a.ranks, r, nil) {
				count++
				if seen[i]++; seen[i] > 1 {
					c.fail(InvSamples, "sample %d trained twice in epoch %d (step %d)", i, epoch, step)
					return
				}
			}
		}
		if count != s.cfg.Batch {
			c.fail(InvSamples, "step %d trained %d samples, want %d", step, count, s.cfg.Batch)
			return
		}
	}
	if ref == nil {
		return
	}
	// Each part that a finishing node held is the fault-free run's same
	// part, when every step of every slot's history ran in a world of the
	// fault-free run's size. Every slot's, not one replica's: the slots of
	// a part may hold steps of two histories of one step (a member cut off
	// kept a step the job trained again in a world of another size, with
	// bit-equal parameters but another optimizer shard, which the leader's
	// lineage check cannot tell apart), and under ZeRO a slot's parameters
	// are gathered from the other slots' updates.
	same := sameSizes(h, ref.history)
	for p := range s.cfg.slots() {
		if ph, ok := c.parts[p]; ok {
			same = same && sameSizes(ph, ref.parts[p])
		}
	}
	for p := range s.cfg.slots() {
		ph, ok := c.parts[p]
		if !ok {
			continue // no node holding it heard the end
		}
		if len(ph) != len(h) {
			c.fail(InvSamples, "the job finished with %d steps trained on part %d, want %d", len(ph), p, len(h))
			return
		}
		for step, got := range ph {
			want := ref.parts[p][step]
			if same && got.checksum != want.checksum {
				c.fail(InvReference, "step %d in worlds of the fault-free run's sizes: part %d checksum %x, fault-free %x", step, p, got.checksum, want.checksum)
				return
			}
		}
	}
	for step, got := range h {
		want := ref.history[step]
		d := math.Abs(float64(got.loss-want.loss)) / max(1, math.Abs(float64(want.loss)))
		c.lossDiff = max(c.lossDiff, d)
		if d > LossTolerance {
			c.fail(InvReference, "step %d loss %g, fault-free %g (ranks %d, fault-free %d)", step, got.loss, want.loss, got.ranks, want.ranks)
			return
		}
	}
}

// sameSizes reports whether every step of history h ran in a world of the
// size of the same step of ref.
func sameSizes(h, ref []applied) bool {
	for step, a := range h {
		if step >= len(ref) || a.ranks != ref[step].ranks {
			return false
		}
	}
	return true
}

// reference is the fault-free run of a configuration: its steps, and
// each part's.
type reference struct {
	history []applied
	parts   map[int][]applied
}
