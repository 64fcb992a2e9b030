package leader

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/worker"
)

func TestPlanLayout(t *testing.T) {
	st := func(applied, held int) worker.Holding {
		return worker.Holding{Applied: applied, Part: held}
	}
	cases := []struct {
		name    string
		states  []worker.Holding
		p, maxD int
		ranks   []int
		roots   []int
		step    int
		source  worker.SourceKind
		lost    []int
		err     error
		tp      int
	}{
		{"dp survivors", []worker.Holding{st(10, 0), st(10, 0), st(10, 0)}, 1, 0, []int{0, 1, 2}, []int{0}, 10, worker.FromReplica, nil, nil, 0},
		{"dp newcomer takes the state", []worker.Holding{st(10, 0), st(10, 0), st(0, -1)}, 1, 0, []int{0, 1, 2}, []int{0}, 10, worker.FromReplica, nil, nil, 0},
		{"dp disagreement: the most advanced is the root", []worker.Holding{st(5, 0), st(6, 0)}, 1, 0, []int{1, 0}, []int{0}, 6, worker.FromReplica, nil, nil, 0},
		{"pp keeps every member on its stage", []worker.Holding{st(5, 1), st(5, 0), st(5, 1), st(5, 0)}, 2, 0, []int{2, 0, 3, 1}, []int{0, 2}, 5, worker.FromReplica, nil, nil, 0},
		{"pp extra member waits", []worker.Holding{st(5, 0), st(5, 1), st(0, -1)}, 2, 0, []int{0, 1, -1}, []int{0, 1}, 5, worker.FromReplica, nil, nil, 0},
		{"pp newcomer fills a stage a survivor still holds", []worker.Holding{st(5, 0), st(0, -1), st(5, 1), st(5, 1)}, 2, 0, []int{0, 1, 2, 3}, []int{0, 2}, 5, worker.FromReplica, nil, nil, 0},
		{"pp lost stage", []worker.Holding{st(5, 0), st(0, -1)}, 2, 0, []int{0, 1}, []int{0, -1}, 5, worker.FromReplica, []int{1}, nil, 0},
		{"first world: fresh", []worker.Holding{st(0, -1), st(0, -1), st(0, -1), st(0, -1)}, 2, 0, []int{0, 1, 2, 3}, nil, 0, worker.FromSeed, nil, nil, 0},
		{"rows cap the replicas: the rest wait", []worker.Holding{st(5, 0), st(5, 1), st(5, 0), st(5, 1)}, 2, 1, []int{0, 1, -1, -1}, []int{0, 1}, 5, worker.FromReplica, nil, nil, 0},
		{"too few for the stages", []worker.Holding{st(5, 0)}, 2, 0, nil, nil, 0, 0, nil, ErrWorldTooSmall, 0},
		// With tensor parallelism the parts are the stages' shards
		// (stage·TP + shard), and rank (pp·DP + dp)·TP + tp holds them.
		{"tp keeps every member on its shard", []worker.Holding{st(5, 1), st(5, 0), st(5, 1), st(5, 0)}, 1, 0, []int{1, 0, 3, 2}, []int{0, 1}, 5, worker.FromReplica, nil, nil, 2},
		{"pp×tp lost shard", []worker.Holding{st(5, 0), st(5, 1), st(5, 2), st(0, -1)}, 2, 0, []int{0, 1, 2, 3}, []int{0, 1, 2, -1}, 5, worker.FromReplica, []int{3}, nil, 2},
		{"too few for the shards", []worker.Holding{st(5, 0), st(5, 1), st(5, 2)}, 2, 0, nil, nil, 0, 0, nil, ErrWorldTooSmall, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := planLayout(tc.states, tc.p, max(1, tc.tp), 0, tc.maxD)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, layout %+v; want %v", err, l, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Rank, tc.ranks) || !slices.Equal(l.Source.Roots, tc.roots) || l.Step != tc.step ||
				l.Source.Kind != tc.source || !slices.Equal(l.Lost, tc.lost) {
				t.Fatalf("layout %+v; want ranks %v roots %v step %d from %s, lost %v", l, tc.ranks, tc.roots, tc.step, tc.source, tc.lost)
			}
			for rank, i := range l.Members {
				if l.Rank[i] != rank || l.Part(i) != l.Mesh.Part(rank) {
					t.Fatalf("member %d at rank %d has rank %d part %d", i, rank, l.Rank[i], l.Part(i))
				}
			}
			for s, r := range l.Source.Roots {
				if r >= 0 && l.Mesh.Part(r) != s {
					t.Fatalf("part %d's root %d holds part %d", s, r, l.Mesh.Part(r))
				}
			}
		})
	}
}

// A member dies between the stages' updates of step 305: stage 0's
// holders applied it, stage 1's survivor did not. The stage-0 holders go
// back to 304 and the generation continues from the survivors at 304;
// without their copy from before the step, only the checkpoint is left.
func TestPlanLayoutUndoesATornStep(t *testing.T) {
	ahead := func(back bool) worker.Holding {
		return worker.Holding{Applied: 305, Cursor: 305 * 48, Part: 0, Undo: back}
	}
	behind := worker.Holding{Applied: 304, Cursor: 304 * 48, Part: 1, Undo: true}

	l, err := planLayout([]worker.Holding{ahead(true), ahead(true), behind}, 2, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 304 || l.Cursor != 304*48 || l.Lost != nil || !slices.Equal(l.Source.Roots, []int{0, 1}) ||
		!slices.Equal(l.RollBack, []bool{true, true, false}) || !slices.Equal(l.Rank, []int{0, -1, 1}) {
		t.Fatalf("layout %+v; want step 304 at cursor %d from roots [0 1], members 0 and 1 rolled back, member 1 standby", l, 304*48)
	}

	// One stage-0 holder cannot go back: it holds nothing, the other is root.
	l, err = planLayout([]worker.Holding{ahead(false), ahead(true), behind, {Applied: 304, Cursor: 304 * 48, Part: 1}}, 2, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 304 || l.Lost != nil || !slices.Equal(l.RollBack, []bool{false, true, false, false}) ||
		l.Members[l.Source.Roots[0]] != 1 {
		t.Fatalf("layout %+v; want step 304, member 1 rolled back and the root of stage 0", l)
	}

	// No stage-0 holder can go back: the step stays torn.
	l, err = planLayout([]worker.Holding{ahead(false), ahead(false), behind}, 2, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 305 || !slices.Equal(l.Lost, []int{1}) || slices.Contains(l.RollBack, true) {
		t.Fatalf("layout %+v; want step 305 with stage 1 lost, nothing rolled back", l)
	}

	// Every stage at the newest step: nothing to undo, even where members could.
	l, err = planLayout([]worker.Holding{ahead(true), behind, {Applied: 305, Part: 1, Undo: true}}, 2, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 305 || l.Lost != nil || slices.Contains(l.RollBack, true) {
		t.Fatalf("layout %+v; want step 305 from survivors, nothing rolled back", l)
	}
}

// With ZeRO the slots are the shards of every part's sharded state: a
// member keeps its shard, the ranks holding the same shard in the other
// shard groups take it from a survivor, and the data-parallel size is a
// multiple of the shard group, the members beyond it on standby.
func TestPlanLayoutZero(t *testing.T) {
	z := func(applied, part, shard, group int) worker.Holding {
		return worker.Holding{Applied: applied, Part: part, ZeroShard: shard, ZeroGroup: group}
	}
	fresh := worker.Holding{Part: -1}
	cases := []struct {
		name         string
		states       []worker.Holding
		pp, group    int
		dp           int
		ranks, roots []int
		lost         []int
		rollBack     []bool
		step         int
	}{
		{"dp4 S2, shard 1 lost: its replica serves it, the extra member waits",
			[]worker.Holding{z(10, 0, 0, 2), z(10, 0, 1, 2), z(10, 0, 0, 2)}, 1, 2, 2, []int{0, 1, -1}, []int{0, 1}, nil, nil, 10},
		{"dp4 S2, shard 0 lost",
			[]worker.Holding{z(10, 0, 1, 2), z(10, 0, 0, 2), z(10, 0, 1, 2)}, 1, 2, 2, []int{1, 0, -1}, []int{0, 1}, nil, nil, 10},
		{"dp2 S2 grows to dp4: the newcomers take each shard from its holder",
			[]worker.Holding{z(10, 0, 0, 2), z(10, 0, 1, 2), fresh, fresh}, 1, 2, 4, []int{0, 1, 2, 3}, []int{0, 1}, nil, nil, 10},
		{"S = the whole group: a shard lost with its only holder",
			[]worker.Holding{z(10, 0, 0, 4), z(10, 0, 1, 4), z(10, 0, 3, 4), fresh}, 1, 4, 4, []int{0, 1, 3, 2}, []int{0, 1, -1, 3}, []int{2}, nil, 10},
		{"state sharded for another group size holds no slot",
			[]worker.Holding{z(10, 0, 0, 4), z(10, 0, 1, 4)}, 1, 2, 2, []int{0, 1}, []int{-1, -1}, []int{0, 1}, nil, 10},
		{"pp2 × S2: every member keeps its stage's shard",
			[]worker.Holding{z(7, 1, 1, 2), z(7, 0, 0, 2), z(7, 1, 0, 2), z(7, 0, 1, 2)}, 2, 2, 2, []int{3, 0, 2, 1}, []int{0, 1, 2, 3}, nil, nil, 7},
		{"torn ZeRO step: the shard-0 holders applied 305, shard 1's survivor did not",
			[]worker.Holding{{Applied: 305, Part: 0, ZeroGroup: 2, Undo: true}, {Applied: 304, Part: 0, ZeroShard: 1, ZeroGroup: 2, Undo: true}, {Applied: 305, Part: 0, ZeroGroup: 2, Undo: true}},
			1, 2, 2, []int{0, 1, -1}, []int{0, 1}, nil, []bool{true, false, true}, 304},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := planLayout(tc.states, tc.pp, 1, tc.group, 0)
			if err != nil {
				t.Fatal(err)
			}
			if l.Mesh.DP != tc.dp || !slices.Equal(l.Rank, tc.ranks) || !slices.Equal(l.Source.Roots, tc.roots) ||
				!slices.Equal(l.Lost, tc.lost) || l.Step != tc.step || l.Source.Kind != worker.FromReplica {
				t.Fatalf("layout %+v; want dp %d ranks %v roots %v lost %v at step %d", l, tc.dp, tc.ranks, tc.roots, tc.lost, tc.step)
			}
			if tc.rollBack != nil && !slices.Equal(l.RollBack, tc.rollBack) {
				t.Fatalf("roll back %v; want %v", l.RollBack, tc.rollBack)
			}
			for s, r := range l.Source.Roots {
				if r >= 0 && l.Mesh.Slot(r, tc.group) != s {
					t.Fatalf("slot %d's root %d holds slot %d", s, r, l.Mesh.Slot(r, tc.group))
				}
			}
		})
	}
	if _, err := planLayout([]worker.Holding{z(10, 0, 0, 2)}, 1, 1, 2, 0); !errors.Is(err, ErrWorldTooSmall) {
		t.Fatalf("one member for shard groups of 2: %v; want ErrWorldTooSmall", err)
	}
}

// Under ZeRO-1 and 2 the shards of a part hold the same parameters; a
// member that kept a step the job later trained again (after restoring an
// older checkpoint in another world) holds other bits of that step, and
// the layout must not take one shard from each history (the seed that
// found it: troupe sim --zero 1 --nodes 4 --seed 143).
func TestOneLineageKeepsOneHistoryOfAPart(t *testing.T) {
	z := func(applied, part, shard int) worker.Holding {
		return worker.Holding{Applied: applied, Part: part, ZeroShard: shard, ZeroGroup: 2, World0: 4}
	}
	// n2 kept shard 0 at step 17 of an abandoned history (sum 0xa); n4
	// and n5 hold shards 1 and 0 at step 17 trained again (sum 0xb).
	states := []worker.Holding{z(17, 0, 0), z(17, 0, 1), z(17, 0, 0)}
	sums := []uint64{0xa, 0xb, 0xb}
	none := make([]uint64, 4) // no member rolls back
	got := oneLineage(states, sums, none, 2, 2)
	if got[0].Part != -1 || got[0].World0 != 4 || got[1] != states[1] || got[2] != states[2] {
		t.Fatalf("oneLineage = %+v; want member 0 dropped, 1 and 2 kept", got)
	}
	if states[0].Part != 0 {
		t.Fatal("oneLineage modified its input")
	}
	l, err := planLayout(got, 1, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Source.Roots, []int{0, 1}) || l.Members[0] != 2 || l.Members[1] != 1 || len(l.Lost) != 0 {
		t.Fatalf("layout %+v; want shard 0 from member 2, shard 1 from member 1", l)
	}
	// A history covering more slots wins over more holders of fewer.
	states = []worker.Holding{z(9, 0, 0), z(9, 0, 0), z(9, 0, 0), z(9, 0, 1)}
	sums = []uint64{0xa, 0xa, 0xb, 0xb}
	got = oneLineage(states, sums, none, 2, 2)
	if got[0].Part != -1 || got[1].Part != -1 || got[2] != states[2] || got[3] != states[3] {
		t.Fatalf("oneLineage = %+v; want members 0 and 1 dropped", got)
	}
	// Other parts, other steps, and one history: as they are.
	states = []worker.Holding{z(9, 0, 0), z(8, 0, 1), z(9, 1, 0)}
	if got := oneLineage(states, []uint64{1, 2, 3}, none, 2, 4); !slices.Equal(got, states) {
		t.Fatalf("oneLineage = %+v; want the states as they are", got)
	}
}

// A member that the layout rolls back (a torn ZeRO step undone) holds,
// once formed, its copy from before its last step, of the history that
// undo_checksum names, not checksum's: oneLineage judges it there. Before
// it did, these layouts took one shard of part 0 from each history, and
// the form ended the job as diverged (the seeds that found it: troupe sim
// --zero 2 --nodes 4 --seed 1253, and 9 others in 2000 at ZeRO-1 and 2).
func TestOneLineageJudgesARolledBackMemberByItsUndoCopy(t *testing.T) {
	z := func(applied, shard int, undo bool) worker.Holding {
		return worker.Holding{Applied: applied, Part: 0, ZeroShard: shard, ZeroGroup: 2, Undo: undo, World0: 4}
	}
	// heldSums is the checksum each root of l holds once formed.
	heldSums := func(l Layout, sums, undoSums []uint64) []uint64 {
		var out []uint64
		for _, r := range l.Source.Roots {
			if i := l.Members[r]; l.RollBack[i] {
				out = append(out, undoSums[i])
			} else {
				out = append(out, sums[i])
			}
		}
		return out
	}

	// Seed 1253: n1 hung after applying step 11 of a world that then
	// lost it (history a); the next world trained steps 11 and 12 again
	// in another world size (history b), and its shard-0 holder crashed.
	// n2 holds shard 1 at 12 (b) and can go back to 11 (b); n4 was on
	// standby at 10, where both histories start. Step 12 is torn (no
	// shard 0), and every shard has a holder at 11: n2 would go back and
	// meet n1 there, a's shard 0 beside b's shard 1. n2's undo copy is
	// not n1's step 11: one of them goes (the tie: the first member's
	// history stays); then n1, alone at 11 with shard 1 only at 10, goes
	// back to 10 too, where it agrees with n4.
	states := []worker.Holding{z(11, 0, true), z(12, 1, true), z(10, 1, false)}
	sums := []uint64{0xa11, 0xb12, 0x10}
	undoSums := []uint64{0x10, 0xb11, 0}
	got := oneLineage(states, sums, undoSums, 2, 2)
	if got[0] != states[0] || got[1].Part != -1 || got[1].World0 != 4 || got[2] != states[2] {
		t.Fatalf("oneLineage = %+v; want member 1 dropped, 0 and 2 kept", got)
	}
	l, err := planLayout(got, 1, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 10 || len(l.Lost) != 0 || !slices.Equal(l.RollBack, []bool{true, false, false}) ||
		!slices.Equal(heldSums(l, sums, undoSums), []uint64{0x10, 0x10}) {
		t.Fatalf("layout %+v; want step 10, member 0 rolled back, both shards of history 0x10", l)
	}

	// The copy a member goes back to can tip the choice: at step 11
	// member 1 holds shard 0 of the abandoned history a and comes first,
	// member 2 shard 0 of b; member 0 holds shard 1 at 12 and goes back
	// to b's 11. Judged by its checksum at 12 it is alone there, a and b
	// tie at 11 and a (the first) stays: a's shard 0 beside b's shard 1.
	// Judged by its copy, b covers both shards and stays.
	states = []worker.Holding{z(12, 1, true), z(11, 0, false), z(11, 0, false)}
	sums = []uint64{0xb12, 0xa11, 0xb11}
	undoSums = []uint64{0xb11, 0, 0}
	got = oneLineage(states, sums, undoSums, 2, 2)
	if got[0] != states[0] || got[1].Part != -1 || got[2] != states[2] {
		t.Fatalf("oneLineage = %+v; want member 1 dropped, 0 and 2 kept", got)
	}
	l, err = planLayout(got, 1, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 11 || len(l.Lost) != 0 || !slices.Equal(l.RollBack, []bool{true, false, false}) ||
		!slices.Equal(heldSums(l, sums, undoSums), []uint64{0xb11, 0xb11}) {
		t.Fatalf("layout %+v; want step 11, member 0 rolled back, both shards of history b", l)
	}

	// No torn step: members are judged by what they hold, and their
	// undo copies (made to differ here) are not read.
	states = []worker.Holding{z(12, 0, true), z(12, 1, true)}
	if got := oneLineage(states, []uint64{0xb12, 0xb12}, []uint64{0x1, 0x2}, 2, 2); !slices.Equal(got, states) {
		t.Fatalf("oneLineage = %+v; want the states as they are", got)
	}
}

// Property: whatever the members hold (parts, shards, steps one apart or
// more, undo copies, checksums from a few histories), the layout planned
// from oneLineage's states takes every slot of a part from one history:
// the roots hold one checksum per part once formed (a root rolled back
// holds its undo copy's).
func TestOneLineageNeverMixes(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 1))
	for c := range 20000 {
		pp, group := 1+r.IntN(2), 2
		n := 1 + r.IntN(7)
		states := make([]worker.Holding, n)
		sums, undoSums := make([]uint64, n), make([]uint64, n)
		for i := range states {
			if r.IntN(6) == 0 {
				states[i] = worker.NoHolding
				continue
			}
			states[i] = worker.Holding{Part: r.IntN(pp), Applied: 8 + r.IntN(3), ZeroGroup: group,
				ZeroShard: r.IntN(group), Undo: r.IntN(3) > 0}
			sums[i] = uint64(1 + r.IntN(3))
			if states[i].Undo {
				undoSums[i] = uint64(1 + r.IntN(3))
			}
		}
		got := oneLineage(states, sums, undoSums, group, pp*group)
		l, err := planLayout(got, pp, 1, group, 0)
		if err != nil || l.Source.Kind != worker.FromReplica {
			continue
		}
		held := map[int]uint64{}
		for slot, root := range l.Source.Roots {
			if root < 0 {
				continue
			}
			i, sum := l.Members[root], sums[l.Members[root]]
			if l.RollBack[i] {
				sum = undoSums[i]
			}
			part := slot / group
			if h, ok := held[part]; ok && h != sum {
				t.Fatalf("case %d: part %d formed from histories %d and %d\nstates %+v\nsums %v undo %v\nkept %+v\nlayout %+v",
					c, part, h, sum, states, sums, undoSums, got, l)
			}
			held[part] = sum
		}
	}
}
