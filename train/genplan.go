package train

import (
	"fmt"
	"slices"

	"github.com/troupe-ml/troupe/data"
)

// memberState is what an elastic member reports of the training state it
// holds when a generation forms.
type memberState struct {
	// Applied is the number of steps whose update it applied.
	Applied int
	// Cursor is the sampler cursor after them.
	Cursor data.Cursor
	// Held is the pipeline stage its model part holds (0 without
	// pipelining), or -1 when it holds none yet.
	Held int
	// CanRollBack: it also holds its state from before its last step, so
	// it can go back to Applied − 1 (pipeline stages keep that copy).
	CanRollBack bool
}

// genPlan lays a generation's members out as D replicas of P stages and
// says where each stage's state comes from. It is computed by the leader
// from the members' states (planGeneration), a pure function.
type genPlan struct {
	D, P int
	// Rank and Stage are each member's grid rank (stage·D + replica) and
	// stage, -1 for a member without a slot (standby: the world holds more
	// members than a multiple of P).
	Rank, Stage []int
	// Members lists the member index of each grid rank.
	Members []int
	// Step and Cursor are where training continues.
	Step   int
	Cursor data.Cursor
	// Roots is the grid rank whose state each stage takes (-1: none).
	Roots []int
	// Fresh: no step was trained yet; every member builds its stage from
	// the seed (or --init) and nothing is transferred.
	Fresh bool
	// RollBack lists the members that first go back one step: a torn
	// step (see undoTornStep) is undone.
	RollBack []bool
	// FromCheckpoint: some stage has no member holding its state at Step
	// (a lost pipeline stage); every member loads its part from the latest
	// checkpoint instead, and Step and Cursor are the checkpoint's.
	FromCheckpoint bool
	// Lost lists those stages.
	Lost []int
}

// planGeneration places members on a grid of p stages. Members keep the
// stage they hold where they can, so that the state of every stage is
// found on a survivor: first the members holding a stage at the newest
// step, then other holders of it, then everyone else in member order; the
// members beyond the largest multiple of p wait as standby. A stage whose
// slots hold no member with its state at the newest step makes the plan
// FromCheckpoint.
func planGeneration(states []memberState, p int) (genPlan, error) {
	n := len(states)
	if p < 1 {
		return genPlan{}, fmt.Errorf("%w: %d pipeline stages", ErrConfig, p)
	}
	d := n / p
	if d == 0 {
		return genPlan{}, fmt.Errorf("%w: %d members cannot hold %d pipeline stages", ErrConfig, n, p)
	}
	states, back := undoTornStep(states, p)
	pl := genPlan{D: d, P: p, Rank: make([]int, n), Stage: make([]int, n), Members: make([]int, d*p), Roots: make([]int, p),
		RollBack: back}
	newest := -1
	for i, s := range states {
		if s.Applied > pl.Step || newest < 0 {
			pl.Step, pl.Cursor, newest = s.Applied, s.Cursor, i
		}
	}
	for i := range states {
		pl.Rank[i], pl.Stage[i] = -1, -1
	}
	slots := make([][]int, p)
	place := func(i, s int) {
		pl.Stage[i] = s
		slots[s] = append(slots[s], i)
	}
	current := func(i int) bool { return states[i].Applied == pl.Step }
	// Pass 1: holders of a stage at the newest step; pass 2: other holders.
	for _, fresh := range []bool{true, false} {
		for i, s := range states {
			if pl.Stage[i] < 0 && s.Held >= 0 && s.Held < p && current(i) == fresh && len(slots[s.Held]) < d {
				place(i, s.Held)
			}
		}
	}
	// Pass 3: everyone else fills the remaining slots, stage by stage.
	for i := range states {
		if pl.Stage[i] >= 0 {
			continue
		}
		for s := 0; s < p; s++ {
			if len(slots[s]) < d {
				place(i, s)
				break
			}
		}
	}
	for s := 0; s < p; s++ {
		pl.Roots[s] = -1
		for r, i := range slots[s] {
			rank := s*d + r
			pl.Rank[i], pl.Members[rank] = rank, i
			if pl.Roots[s] < 0 && states[i].Held == s && current(i) {
				pl.Roots[s] = rank
			}
		}
	}
	if pl.Step == 0 {
		pl.Fresh = true
		for s := range pl.Roots {
			pl.Roots[s] = -1
		}
		return pl, nil
	}
	for s := 0; s < p; s++ {
		if pl.Roots[s] < 0 {
			pl.FromCheckpoint = true
			pl.Lost = append(pl.Lost, s)
		}
	}
	return pl, nil
}

// undoTornStep undoes a torn step. The stages of a pipeline apply a step's
// update each on its own, so a member that dies between them leaves some
// stages at step k and another only at k − 1, with no survivor holding
// that stage at k. When every stage has a holder at k − 1 or one that can
// roll back to it, the members at k go back to k − 1: they come out as at
// k − 1 (marked in back), and a member at k that cannot go back comes out
// holding nothing, to take its stage's state from a root. Otherwise, or
// when no step is torn, states come back as they are.
func undoTornStep(states []memberState, p int) (_ []memberState, back []bool) {
	back = make([]bool, len(states))
	newest := 0
	for _, s := range states {
		newest = max(newest, s.Applied)
	}
	if newest == 0 {
		return states, back
	}
	atNewest, atPrev := make([]bool, p), make([]bool, p)
	var prevCursor data.Cursor
	for _, s := range states {
		if s.Held < 0 || s.Held >= p {
			continue
		}
		switch s.Applied {
		case newest:
			atNewest[s.Held] = true
			atPrev[s.Held] = atPrev[s.Held] || s.CanRollBack
		case newest - 1:
			atPrev[s.Held] = true
		}
	}
	torn := false
	for s := range p {
		if !atPrev[s] {
			return states, back
		}
		torn = torn || !atNewest[s]
	}
	if !torn {
		return states, back
	}
	for _, s := range states {
		if s.Applied == newest-1 && s.Held >= 0 {
			prevCursor = s.Cursor
			break
		}
	}
	out := slices.Clone(states)
	for i, s := range states {
		if s.Applied != newest {
			continue
		}
		out[i].Applied, out[i].Cursor, out[i].CanRollBack = newest-1, prevCursor, false
		if s.CanRollBack {
			back[i] = true
		} else {
			out[i].Held = -1
		}
	}
	return out, back
}
