package worker

import (
	"fmt"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/mesh"
)

// Holding is what a worker holds of the training state between steps.
type Holding struct {
	// Part is the model part whose state it holds: its pipeline stage's
	// tensor-parallel shard, stage·TP + shard (0 without pipelining or
	// tensor parallelism), −1 before it holds any.
	Part int
	// Applied is the number of steps whose update that state includes;
	// Cursor the sampler cursor after them.
	Applied int
	Cursor  data.Cursor
	// Undo: it also holds its state from before the last step (Spec.
	// KeepUndo), which belongs to step Applied − 1 and cursor UndoCursor.
	Undo       bool
	UndoCursor data.Cursor
	// World0 is the data-parallel size of the job's first generation (the
	// linear learning-rate scaling rule's reference), 0 before any.
	World0 int
	// ZeroGroup is the ZeRO shard group size the state is sharded for (0:
	// not sharded) and ZeroShard the worker's shard in its group: with
	// ZeRO it holds that shard of the part's optimizer state (and of its
	// weights, at stage 3), mesh.Mesh.Slot.
	ZeroGroup, ZeroShard int
}

// Slot is the slot of the state held under shard groups of s (−1: none
// held, or sharded otherwise): Part without ZeRO, see mesh.Mesh.Slot.
func (h Holding) Slot(s int) int {
	if h.Part < 0 || h.ZeroGroup != s {
		return -1
	}
	return h.Part*max(1, s) + h.ZeroShard
}

// NoHolding is a worker that holds nothing yet.
var NoHolding = Holding{Part: -1}

// SourceKind is where a model part's state comes from when a generation forms.
type SourceKind uint8

const (
	// FromSeed: nothing was trained yet; every worker builds its part
	// from the seed (or Spec.Init) and nothing is transferred.
	FromSeed SourceKind = iota
	// FromReplica: the part's data-parallel group takes the state of one
	// of its ranks (Source.Root), which holds it at the generation's step.
	FromReplica
	// FromCheckpoint: every worker restores its part from the checkpoint
	// of step Source.Step (a part no member holds, or --resume).
	FromCheckpoint
)

func (k SourceKind) String() string {
	switch k {
	case FromSeed:
		return "seed"
	case FromReplica:
		return "replica"
	case FromCheckpoint:
		return "checkpoint"
	}
	return fmt.Sprintf("source(%d)", uint8(k))
}

// Source says where every model part of a generation takes its state from.
type Source struct {
	Kind SourceKind
	// Roots is, for FromReplica, the mesh rank whose state each model
	// part takes, by part (mesh.Mesh.Part); with ZeRO, whose state each
	// shard of a part takes, by slot (mesh.Mesh.Slot): the ranks holding
	// the same shard in the other shard groups take it.
	Roots []int
	// Step is, for FromCheckpoint, the checkpoint's step.
	Step int
}

// Form places a worker in a generation.
type Form struct {
	Generation uint64
	// Mesh is the generation's world; Rank this worker's rank in it, −1
	// for a worker without a slot (standby).
	Mesh mesh.Mesh
	Rank int
	// Step and Cursor are where training continues.
	Step   int
	Cursor data.Cursor
	Source Source
	// RollBack: undo the last step first (the worker is at Step + 1 and
	// kept its state from before it).
	RollBack bool
	// World0 is the job's first generation's data-parallel size.
	World0 int
	// ZeroGroup is the ZeRO shard group size (0: no ZeRO).
	ZeroGroup int
}

// Standby reports whether the form gives the worker no slot.
func (f Form) Standby() bool { return f.Rank < 0 }

// FormPlan is what a worker does to join a generation, in order.
type FormPlan struct {
	// RollBack: go back to the state from before the last step.
	RollBack bool
	// Drop: forget the state held; it is ahead of the generation's step.
	Drop bool
	// Build is the model part to build anew from the seed (−1: keep the
	// one built).
	Build int
	// Restore is the checkpoint step to restore from (0: none).
	Restore int
	// Root is the mesh rank whose state the part's data-parallel group
	// takes (−1: none); the root itself sends it.
	Root int
	// Next is what the worker holds once it joined.
	Next Holding
}

// Plan says what a worker holding h, with a model part built for part
// built (−1: none), does to join generation f. It checks what the worker
// can check itself: a roll-back it kept no copy for, a part it is to
// serve but does not hold.
func (h Holding) Plan(f Form, built int) (FormPlan, error) {
	p := FormPlan{Build: -1, Root: -1}
	if f.RollBack {
		if !h.Undo || h.Applied != f.Step+1 {
			return p, fmt.Errorf("%w: asked to undo step %d, but this worker holds step %d and kept no copy from before it", ErrNoState, f.Step+1, h.Applied)
		}
		p.RollBack = true
		h.Applied, h.Cursor = h.Applied-1, h.UndoCursor
	}
	h.Undo, h.UndoCursor = false, 0 // every member starts the generation at f.Step
	h.World0 = f.World0
	if h.Applied > f.Step {
		// State ahead of the generation (a torn step it could not undo,
		// steps past the checkpoint a lost part restarts from) is
		// dropped: the worker holds nothing until it takes a part.
		p.Drop = true
		h.Part, h.Applied, h.Cursor = -1, 0, 0
	}
	if f.Standby() {
		p.Next = h
		return p, nil
	}
	if err := f.Mesh.Validate(); err != nil || f.Rank >= f.Mesh.Size() {
		return p, fmt.Errorf("%w: rank %d of a %v world", ErrConfig, f.Rank, f.Mesh)
	}
	if f.ZeroGroup < 0 || f.ZeroGroup > 0 && f.Mesh.DP%f.ZeroGroup != 0 {
		return p, fmt.Errorf("%w: ZeRO shard groups of %d in a %v world", ErrConfig, f.ZeroGroup, f.Mesh)
	}
	st, slot := f.Mesh.Part(f.Rank), f.Mesh.Slot(f.Rank, f.ZeroGroup)
	if built != st || f.Source.Kind == FromSeed {
		p.Build = st
		h.Part = -1
	}
	switch f.Source.Kind {
	case FromCheckpoint:
		if f.Source.Step <= 0 {
			return p, fmt.Errorf("%w: restore from checkpoint step %d", ErrConfig, f.Source.Step)
		}
		p.Restore = f.Source.Step
	case FromReplica:
		if len(f.Source.Roots) != f.Mesh.Slots(f.ZeroGroup) {
			return p, fmt.Errorf("%w: %d roots for %d slots", ErrConfig, len(f.Source.Roots), f.Mesh.Slots(f.ZeroGroup))
		}
		p.Root = f.Source.Roots[slot]
		if p.Root == f.Rank && (h.Slot(f.ZeroGroup) != slot || h.Applied != f.Step) {
			return p, fmt.Errorf("%w: asked to serve %s at step %d, but this worker holds %s at step %d",
				ErrNoState, slotName(st, slot, f.ZeroGroup), f.Step, slotName(h.Part, h.Slot(h.ZeroGroup), h.ZeroGroup), h.Applied)
		}
	}
	h.Part, h.Applied, h.Cursor = st, f.Step, f.Cursor
	h.ZeroGroup, h.ZeroShard = f.ZeroGroup, slot-st*max(1, f.ZeroGroup)
	p.Next = h
	return p, nil
}

// slotName names a slot for errors: the part, and its ZeRO shard.
func slotName(part, slot, zeroGroup int) string {
	if zeroGroup == 0 || part < 0 {
		return fmt.Sprintf("part %d", part)
	}
	return fmt.Sprintf("part %d's ZeRO shard %d of %d", part, slot-part*zeroGroup, zeroGroup)
}
