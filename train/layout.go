package train

import (
	"fmt"
	"slices"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
)

// layout places an elastic generation's members on a mesh of D replicas ×
// P stages × T tensor-parallel shards and says where each model part's
// state comes from (a part is a stage's shard, mesh.Mesh.Part). planLayout
// computes it from what the members hold: a pure function.
type layout struct {
	Mesh mesh.Mesh
	// Rank is each member's mesh rank, −1 for a member without a slot
	// (standby: more members than D × P × T); Members is each rank's
	// member.
	Rank, Members []int
	// Step and Cursor are where training continues.
	Step   int
	Cursor data.Cursor
	// Source is where the parts' state comes from: the seed (nothing
	// trained yet), the replicas (Roots, by part), or, for Lost parts,
	// nowhere yet: the caller picks a checkpoint or waits.
	Source worker.Source
	// RollBack lists the members that first go back one step (a torn step
	// undone).
	RollBack []bool
	// Lost lists the parts that no member holds at Step.
	Lost []int
}

// planLayout places the members with states on pp stages of tp shards
// each, at most maxReplicas replicas (0: no limit). Members keep the part
// they hold where they can, so that the state of every part is found on a
// survivor: first the members holding a part at the newest step, then
// other holders of it, then everyone else in member order; members beyond
// D × P × T wait as standby. A torn step is undone first (undoTornStep).
// It fails with ErrWorldTooSmall when there are fewer members than parts.
func planLayout(states []worker.Holding, pp, tp, maxReplicas int) (layout, error) {
	n, p := len(states), pp*tp
	d := n / p
	if maxReplicas > 0 {
		d = min(d, maxReplicas)
	}
	if d == 0 {
		if tp > 1 {
			return layout{}, fmt.Errorf("%w: %d members cannot hold %d pipeline stages of %d tensor-parallel shards", ErrWorldTooSmall, n, pp, tp)
		}
		return layout{}, fmt.Errorf("%w: %d members cannot hold %d pipeline stages", ErrWorldTooSmall, n, pp)
	}
	m, err := mesh.New(d, pp, tp)
	if err != nil {
		return layout{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	states, back := undoTornStep(states, p)
	l := layout{Mesh: m, Rank: make([]int, n), Members: make([]int, m.Size()), RollBack: back}
	newest := -1
	for i, s := range states {
		if s.Applied > l.Step || newest < 0 {
			l.Step, l.Cursor, newest = s.Applied, s.Cursor, i
		}
	}
	part := make([]int, n)
	for i := range states {
		l.Rank[i], part[i] = -1, -1
	}
	slots := make([][]int, p)
	place := func(i, s int) {
		part[i] = s
		slots[s] = append(slots[s], i)
	}
	current := func(i int) bool { return states[i].Applied == l.Step }
	// Holders of a part at the newest step, then other holders.
	for _, fresh := range []bool{true, false} {
		for i, s := range states {
			if part[i] < 0 && s.Part >= 0 && s.Part < p && current(i) == fresh && len(slots[s.Part]) < d {
				place(i, s.Part)
			}
		}
	}
	// Everyone else fills the remaining slots, part by part.
	for i := range states {
		for s := 0; s < p && part[i] < 0; s++ {
			if len(slots[s]) < d {
				place(i, s)
			}
		}
	}
	roots := make([]int, p)
	for s := range p {
		roots[s] = -1
		for r, i := range slots[s] {
			rank := m.PartRank(s, r)
			l.Rank[i], l.Members[rank] = rank, i
			if roots[s] < 0 && states[i].Part == s && current(i) {
				roots[s] = rank
			}
		}
	}
	if l.Step == 0 {
		l.Source = worker.Source{Kind: worker.FromSeed}
		return l, nil
	}
	l.Source = worker.Source{Kind: worker.FromReplica, Roots: roots}
	for s, r := range roots {
		if r < 0 {
			l.Lost = append(l.Lost, s)
		}
	}
	return l, nil
}

// Part is member i's model part (−1: standby).
func (l layout) Part(i int) int {
	if l.Rank[i] < 0 {
		return -1
	}
	return l.Mesh.Part(l.Rank[i])
}

// undoTornStep undoes a torn step over p model parts. The stages of a
// pipeline apply a step's update each on its own, so a member that dies
// between them leaves some parts at step k and another only at k − 1,
// with no survivor holding that part at k. When every part has a holder
// at k − 1 or one that can roll back to it, the members at k go back to
// k − 1: they come out as at k − 1 (marked in back), and a member at k
// that cannot go back comes out holding nothing, to take its part's state
// from a root. Otherwise, or when no step is torn, states come back as
// they are.
func undoTornStep(states []worker.Holding, p int) (_ []worker.Holding, back []bool) {
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
		if s.Part < 0 || s.Part >= p {
			continue
		}
		switch s.Applied {
		case newest:
			atNewest[s.Part] = true
			atPrev[s.Part] = atPrev[s.Part] || s.Undo
		case newest - 1:
			atPrev[s.Part] = true
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
		if s.Applied == newest-1 && s.Part >= 0 {
			prevCursor = s.Cursor
			break
		}
	}
	out := slices.Clone(states)
	for i, s := range states {
		if s.Applied != newest {
			continue
		}
		out[i].Applied, out[i].Cursor, out[i].Undo = newest-1, prevCursor, false
		if s.Undo {
			back[i] = true
		} else {
			out[i].Part = -1
		}
	}
	return out, back
}
