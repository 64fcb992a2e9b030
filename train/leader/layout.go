package leader

import (
	"fmt"
	"slices"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
)

// Layout places an elastic generation's members on a mesh of D replicas ×
// P stages × T tensor-parallel shards and says where each slot's state
// comes from: a slot is a model part (a stage's shard, mesh.Mesh.Part),
// or with ZeRO one shard of a part's sharded state (mesh.Mesh.Slot).
// planLayout computes it from what the members hold: a pure function.
type Layout struct {
	Mesh mesh.Mesh
	// ZeroGroup is the ZeRO shard group size (0: no ZeRO).
	ZeroGroup int
	// Rank is each member's mesh rank, −1 for a member without a slot
	// (standby: more members than D × P × T); Members is each rank's
	// member.
	Rank, Members []int
	// Step and Cursor are where training continues.
	Step   int
	Cursor data.Cursor
	// Source is where the slots' state comes from: the seed (nothing
	// trained yet), the replicas (Roots, by slot), or, for Lost slots,
	// nowhere yet: the caller picks a checkpoint or waits.
	Source worker.Source
	// RollBack lists the members that first go back one step (a torn step
	// undone).
	RollBack []bool
	// Lost lists the slots that no member holds at Step.
	Lost []int
}

// planLayout places the members with states on pp stages of tp shards
// each, at most maxReplicas replicas (0: no limit), cut into ZeRO shard
// groups of zeroGroup replicas (0: no ZeRO; the replicas are then a
// multiple of it). Members keep the slot they hold where they can, so that
// the state of every slot is found on a survivor: first the members
// holding a slot at the newest step, then other holders of it, then
// everyone else in member order, in rank order of the places left;
// members beyond the mesh wait as standby.
// A torn step is undone first (undoTornStep). It fails with
// ErrWorldTooSmall when there are too few members for one replica (one
// shard group with ZeRO).
func planLayout(states []worker.Holding, pp, tp, zeroGroup, maxReplicas int) (Layout, error) {
	S, n := max(1, zeroGroup), len(states)
	d, err := replicasFor(n, pp, tp, zeroGroup, maxReplicas)
	if err != nil {
		return Layout{}, err
	}
	m, err := mesh.New(d, pp, tp)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	ns := m.Slots(zeroGroup)
	states, back := undoTornStep(states, zeroGroup, ns)
	l := Layout{Mesh: m, ZeroGroup: zeroGroup, Rank: make([]int, n), Members: make([]int, m.Size()), RollBack: back}
	newest := -1
	for i, s := range states {
		if s.Applied > l.Step || newest < 0 {
			l.Step, l.Cursor, newest = s.Applied, s.Cursor, i
		}
	}
	slot := make([]int, n)
	for i := range states {
		l.Rank[i], slot[i] = -1, -1
	}
	holders := make([][]int, ns)
	place := func(i, s int) {
		slot[i] = s
		holders[s] = append(holders[s], i)
	}
	current := func(i int) bool { return states[i].Applied == l.Step }
	// Holders of a slot at the newest step, then other holders.
	for _, fresh := range []bool{true, false} {
		for i, s := range states {
			if h := s.Slot(zeroGroup); slot[i] < 0 && h >= 0 && h < ns && current(i) == fresh && len(holders[h]) < d/S {
				place(i, h)
			}
		}
	}
	// Everyone else, in member order, fills the free places in rank order
	// (a slot's places are taken in shard-group order: its holders above
	// are groups 0, 1, …).
	next := 0
	for r := range m.Size() {
		s := m.Slot(r, zeroGroup)
		if m.Coord(r).DP/S != len(holders[s]) {
			continue
		}
		for next < n && slot[next] >= 0 {
			next++
		}
		if next == n {
			break
		}
		place(next, s)
	}
	roots := make([]int, ns)
	for s := range ns {
		roots[s] = -1
		for g, i := range holders[s] {
			rank := m.SlotRank(s, g, zeroGroup)
			l.Rank[i], l.Members[rank] = rank, i
			if roots[s] < 0 && states[i].Slot(zeroGroup) == s && current(i) {
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

// replicasFor is how many replicas n members hold of a model of pp stages
// of tp shards: a multiple of the ZeRO shard group, at most maxReplicas
// (0: no bound); none is ErrWorldTooSmall.
func replicasFor(n, pp, tp, zeroGroup, maxReplicas int) (int, error) {
	S := max(1, zeroGroup)
	d := n / (pp * tp)
	if maxReplicas > 0 {
		d = min(d, maxReplicas)
	}
	d -= d % S
	if d > 0 {
		return d, nil
	}
	what := fmt.Sprintf("%d pipeline stages", pp)
	if tp > 1 {
		what = fmt.Sprintf("%d pipeline stages of %d tensor-parallel shards", pp, tp)
	}
	if zeroGroup > 0 {
		what = fmt.Sprintf("%d replicas (a ZeRO shard group) of %s", S, what)
	}
	return 0, fmt.Errorf("%w: %d members cannot hold %s", ErrWorldTooSmall, n, what)
}

// Part is member i's model part (−1: standby).
func (l Layout) Part(i int) int {
	if l.Rank[i] < 0 {
		return -1
	}
	return l.Mesh.Part(l.Rank[i])
}

// undoTornStep undoes a torn step over ns slots (ZeRO shard groups of
// zeroGroup, see planLayout). The stages of a pipeline apply a step's
// update each on its own, and so do the shards of a ZeRO group, so a
// member that dies between them leaves some slots at step k and another
// only at k − 1, with no survivor holding that slot at k. When every slot
// has a holder at k − 1 or one that can roll back to it, the members at k
// go back to k − 1: they come out as at k − 1 (marked in back), and a
// member at k that cannot go back comes out holding nothing, to take its
// slot's state from a root. Otherwise, or when no step is torn, states
// come back as they are.
func undoTornStep(states []worker.Holding, zeroGroup, ns int) (_ []worker.Holding, back []bool) {
	back = make([]bool, len(states))
	newest := 0
	for _, s := range states {
		newest = max(newest, s.Applied)
	}
	if newest == 0 {
		return states, back
	}
	atNewest, atPrev := make([]bool, ns), make([]bool, ns)
	var prevCursor data.Cursor
	for _, s := range states {
		h := s.Slot(zeroGroup)
		if h < 0 || h >= ns {
			continue
		}
		switch s.Applied {
		case newest:
			atNewest[h] = true
			atPrev[h] = atPrev[h] || s.Undo
		case newest - 1:
			atPrev[h] = true
		}
	}
	torn := false
	for s := range ns {
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
