package leader

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// plan lays the generation out from the members' states and tells every
// member its place.
func (c *Core) plan() {
	if c.cfg.Async {
		c.planAsync()
		return
	}
	maxD := 0
	if c.rowPerMicro() && (!c.cfg.LinearLR || c.world0 == 0) {
		maxD = max(1, c.cfg.Batch/c.cfg.MicroBatches) // a row for every micro-batch of every replica
	}
	l, err := planLayout(c.states, c.cfg.PP, max(1, c.cfg.TP), c.cfg.ZeroGroup, maxD)
	if err != nil {
		if errors.Is(err, ErrWorldTooSmall) && c.nothingTrained() {
			c.wait(fmt.Sprintf("%v; waiting for more members", err))
			return
		}
		c.end(fmt.Errorf("generation %d: %w", c.world.Gen, err))
		return
	}
	switch {
	case l.Source.Kind == worker.FromSeed && c.jobStep > 0:
		// No member holds anything, but the job trained: every holder of
		// its state is gone. Only a checkpoint restores it; the seed would
		// train the job again from step 0.
		if c.ckpt.Err != nil {
			l.Step, l.Lost = c.jobStep, identity(l.Mesh.Slots(l.ZeroGroup))
			c.stageLost(l, c.ckpt.Err)
			return
		}
		c.fromCheckpoint(&l)
	case l.Source.Kind == worker.FromSeed && c.cfg.Resume:
		if c.ckpt.Err != nil && (c.cfg.ResumeRequired || !errors.Is(c.ckpt.Err, checkpoint.ErrNoCheckpoint)) {
			c.end(fmt.Errorf("generation %d: resume: %w", c.world.Gen, c.ckpt.Err))
			return
		}
		if c.ckpt.Err == nil {
			c.fromCheckpoint(&l)
		}
	case len(l.Lost) > 0:
		if c.ckpt.Err != nil {
			c.stageLost(l, c.ckpt.Err)
			return
		}
		c.fromCheckpoint(&l)
	}
	if c.world0 == 0 {
		c.world0 = l.Mesh.DP // the job's first world
	}
	c.lay, c.lostSince = l, time.Time{}
	c.phase = PhaseForm
	addrs := make([]string, l.Mesh.Size())
	for r, i := range l.Members {
		addrs[r] = c.world.Members[i].ActorAddr
	}
	c.call(func(i int) any {
		f := &workerpb.Form{Peer: uint32(i), Generation: c.world.Gen, Rank: -1, Step: uint64(l.Step), Cursor: uint64(l.Cursor),
			RollBack: l.RollBack[i], World0: uint32(c.world0), ZeroGroup: uint32(l.ZeroGroup)}
		if r := l.Rank[i]; r >= 0 {
			f.Dp, f.Pp, f.Tp, f.Rank, f.Addrs = uint32(l.Mesh.DP), uint32(l.Mesh.PP), uint32(l.Mesh.TP), int32(r), addrs
			f.Source, f.CheckpointStep = uint32(l.Source.Kind), uint64(l.Source.Step)
			for _, root := range l.Source.Roots {
				f.Roots = append(f.Roots, int32(root))
			}
		}
		return f
	})
}

// planAsync lays out a generation of asynchronous training: every member
// a replica (built from the seed: it computes on the servers' weights),
// and the servers continuing from those this node kept, else from the
// latest checkpoint, else from the seed when the job has not trained.
// Trained but with neither, the servers' state is lost: the job ends.
func (c *Core) planAsync() {
	n := c.world.Size()
	m, err := mesh.New(n, 1, 1)
	if err != nil {
		c.end(fmt.Errorf("generation %d: %w", c.world.Gen, err))
		return
	}
	l := Layout{Mesh: m, Rank: identity(n), Members: identity(n), RollBack: make([]bool, n)}
	noCkpt := errors.Is(c.ckpt.Err, checkpoint.ErrNoCheckpoint)
	// Servers kept from before a generation this node did not see are
	// behind a member that computed a later step: not continued from.
	ahead := false
	for _, st := range c.states {
		ahead = ahead || c.servers != nil && st.Applied > c.servers.Step
	}
	switch {
	case c.servers != nil && !ahead:
		l.Step, l.Cursor, l.Source = c.servers.Step, c.servers.Cursor, worker.Source{Kind: worker.FromReplica}
	case noCkpt && c.cfg.ResumeRequired && c.nothingTrained():
		c.end(fmt.Errorf("generation %d: resume: %w", c.world.Gen, c.ckpt.Err))
		return
	case c.ckpt.Err == nil && (c.cfg.Resume || !c.nothingTrained()):
		c.fromCheckpoint(&l)
	case c.ckpt.Err != nil && !noCkpt && (c.cfg.Resume || !c.nothingTrained()):
		c.end(fmt.Errorf("generation %d: the parameter servers' checkpoint: %w", c.world.Gen, c.ckpt.Err))
		return
	case !c.nothingTrained():
		c.end(fmt.Errorf("%w: generation %d: the parameter servers' state was lost with the node that led the job, before any checkpoint (--ckpt-every)", ErrStageLost, c.world.Gen))
		return
	}
	if c.world0 == 0 {
		c.world0 = n
	}
	c.lay, c.lostSince = l, time.Time{}
	c.phase = PhaseForm
	c.call(func(i int) any {
		return &workerpb.Form{Peer: uint32(i), Generation: c.world.Gen, Dp: 1, Pp: 1, Tp: 1, Rank: 0,
			Addrs: []string{c.world.Members[i].ActorAddr}, Step: uint64(l.Step), Cursor: uint64(l.Cursor), World0: 1}
	})
}

// rowPerMicro reports whether every replica needs a row for each of its
// micro-batches: a pipeline's stages pass each one on, and ZeRO-3's
// replicas gather every layer together for each.
func (c *Core) rowPerMicro() bool { return c.cfg.PP > 1 || c.cfg.ZeroShards > 0 }

// nothingTrained reports whether the job has not trained: no member holds
// any state yet, nor heard of a step trained.
func (c *Core) nothingTrained() bool {
	if c.jobStep > 0 {
		return false
	}
	for _, s := range c.states {
		if s.Applied > 0 {
			return false
		}
	}
	return true
}

// fromCheckpoint makes every stage of l take its state from the latest
// checkpoint, where training continues.
func (c *Core) fromCheckpoint(l *Layout) {
	l.Source = worker.Source{Kind: worker.FromCheckpoint, Step: c.ckpt.Step}
	l.Step, l.Cursor, l.Lost = c.ckpt.Step, c.ckpt.Cursor, nil
	for i := range l.RollBack {
		l.RollBack[i] = false // members ahead of the checkpoint drop their state
	}
}

// stageLost answers a layout in which a stage has no holder and no
// checkpoint can restore it (cause): the job waits for a holder to come
// back (a hung or partitioned node keeps its state) up to
// LostStageTimeout, then ends.
func (c *Core) stageLost(l Layout, cause error) {
	if c.lostSince.IsZero() {
		c.lostSince = c.now
	}
	waited := c.now.Sub(c.lostSince)
	what := fmt.Sprintf("%s: no member holds its state at step %d, and the latest checkpoint cannot restore it (%v)",
		slotNames(l.Mesh, l.ZeroGroup, l.Lost), l.Step, cause)
	if waited < c.cfg.LostStageTimeout {
		// Not a restart: the lost-stage timeout bounds this wait.
		c.retry(failure.Wrapf(failure.Stale, "generation %d: %s; waiting for a member that holds it", c.world.Gen, what), c.cfg.RetryDelay)
		return
	}
	c.end(fmt.Errorf("%w: %s; no member holding it came back within %s (--lost-stage-timeout)", ErrStageLost, what, waited.Round(time.Millisecond)))
}

// slotNames names slots (layout.Lost): pipeline stages, stages'
// tensor-parallel shards, and with ZeRO their ZeRO shards.
func slotNames(m mesh.Mesh, zeroGroup int, slots []int) string {
	if m.TP == 1 && zeroGroup == 0 {
		return "pipeline stage " + joinInts(slots)
	}
	S := max(1, zeroGroup)
	names := make([]string, len(slots))
	for i, s := range slots {
		p := s / S
		names[i] = fmt.Sprintf("stage %d", p/m.TP)
		if m.TP > 1 {
			names[i] = fmt.Sprintf("stage %d's tensor-parallel shard %d", p/m.TP, p%m.TP)
		}
		if zeroGroup > 0 {
			names[i] += fmt.Sprintf("'s ZeRO shard %d of %d", s%S, S)
		}
	}
	return strings.Join(names, ", ")
}

func stateFrom(l Layout, async bool) string {
	switch l.Source.Kind {
	case worker.FromReplica:
		if async {
			return "the parameter servers"
		}
	case worker.FromSeed:
		return "seed"
	case worker.FromCheckpoint:
		return fmt.Sprintf("checkpoint step %d", l.Source.Step)
	}
	return "surviving replicas"
}

// replicatedShards: the ranks of a ZeRO shard group hold the same
// parameters (ZeRO-1 and 2: each holds its shard of the optimizer state,
// the weights are all-gathered after every update), which the form
// compares across the shards of a part.
func (c *Core) replicatedShards() bool { return c.cfg.ZeroGroup > 0 && c.cfg.ZeroShards == 0 }

// oneLineage keeps, of the members holding the same part at the same
// step under ZeRO-1 or 2, those of one history: the states whose
// parameter checksums agree. Two histories of one step meet when a member
// cut off from the job (a partition, a hang) kept a step that the job
// later trained again after restoring an older checkpoint, or from an
// older step in another world (other bits). Without this the layout
// could take one shard of a part from each history, and the form's
// comparison of the part's parameters ends the job as diverged. The
// history whose holders cover the most slots of the part is kept (then
// the most holders, then the first member's); the other holders come out
// holding nothing, to take their slot's state from a root or a
// checkpoint. A pure function; states are not modified.
//
// A member is judged at the step and by the checksum of the state it
// will hold when the generation forms: sums[i] for the state it holds,
// undoSums[i] (Status.undo_checksum) for a member that planLayout rolls
// back to its copy from before its last step (undoTornStep over slots
// slots). That copy may belong to another history than the step it
// holds, which another member holds at the step before. Dropping a
// member can change which torn step is undone, so the members are judged
// again until no one more is dropped: the states that come out are the
// ones planLayout sees, with the same roll back. A worker that does not
// report the undo checksum sends 0: such members agree with no other
// member going back, but with each other, unchecked as before the field.
func oneLineage(states []worker.Holding, sums, undoSums []uint64, zeroGroup, slots int) []worker.Holding {
	out := slices.Clone(states)
	for {
		formed, back := undoTornStep(out, zeroGroup, slots)
		sum := func(i int) uint64 {
			if back[i] {
				return undoSums[i]
			}
			return sums[i]
		}
		drop := otherHistories(formed, sum, zeroGroup)
		if len(drop) == 0 {
			return out
		}
		for _, i := range drop {
			out[i] = worker.Holding{Part: -1, World0: states[i].World0}
		}
	}
}

// otherHistories lists the members to drop for oneLineage: of the
// holders of each part at each step in states, those whose checksum
// (sum) is not the kept history's.
func otherHistories(states []worker.Holding, sum func(i int) uint64, zeroGroup int) []int {
	type key struct{ part, step int }
	type history struct {
		slots   map[int]bool
		holders int
		first   int
	}
	byKey := map[key]map[uint64]*history{}
	for i, s := range states {
		if s.Slot(zeroGroup) < 0 {
			continue
		}
		k := key{s.Part, s.Applied}
		if byKey[k] == nil {
			byKey[k] = map[uint64]*history{}
		}
		h := byKey[k][sum(i)]
		if h == nil {
			h = &history{slots: map[int]bool{}, first: i}
			byKey[k][sum(i)] = h
		}
		h.slots[s.Slot(zeroGroup)] = true
		h.holders++
	}
	var drop []int
	for i, s := range states {
		hs := byKey[key{s.Part, s.Applied}]
		if len(hs) <= 1 || s.Slot(zeroGroup) < 0 {
			continue
		}
		var best *history
		for _, h := range hs {
			if best == nil || len(h.slots) > len(best.slots) ||
				len(h.slots) == len(best.slots) && (h.holders > best.holders || h.holders == best.holders && h.first < best.first) {
				best = h
			}
		}
		if hs[sum(i)] != best {
			drop = append(drop, i)
		}
	}
	return drop
}
