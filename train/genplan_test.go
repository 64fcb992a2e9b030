package train

import (
	"slices"
	"testing"
)

func TestPlanGeneration(t *testing.T) {
	st := func(applied, held int) memberState {
		return memberState{Applied: applied, Cursor: 0, Held: held}
	}
	cases := []struct {
		name      string
		states    []memberState
		p         int
		ranks     []int
		roots     []int
		step      int
		fresh     bool
		fromCkpt  bool
		wantError bool
	}{
		{"dp survivors", []memberState{st(10, 0), st(10, 0), st(10, 0)}, 1, []int{0, 1, 2}, []int{0}, 10, false, false, false},
		{"dp newcomer takes the state", []memberState{st(10, 0), st(10, 0), st(0, -1)}, 1, []int{0, 1, 2}, []int{0}, 10, false, false, false},
		{"dp disagreement: the most advanced is the root", []memberState{st(5, 0), st(6, 0)}, 1, []int{1, 0}, []int{0}, 6, false, false, false},
		{"pp keeps every member on its stage", []memberState{st(5, 1), st(5, 0), st(5, 1), st(5, 0)}, 2, []int{2, 0, 3, 1}, []int{0, 2}, 5, false, false, false},
		{"pp extra member waits", []memberState{st(5, 0), st(5, 1), st(0, -1)}, 2, []int{0, 1, -1}, []int{0, 1}, 5, false, false, false},
		{"pp newcomer fills a stage a survivor still holds", []memberState{st(5, 0), st(0, -1), st(5, 1), st(5, 1)}, 2, []int{0, 1, 2, 3}, []int{0, 2}, 5, false, false, false},
		{"pp lost stage: from the checkpoint", []memberState{st(5, 0), st(0, -1)}, 2, []int{0, 1}, []int{0, -1}, 5, false, true, false},
		{"first world: fresh", []memberState{st(0, -1), st(0, -1), st(0, -1), st(0, -1)}, 2, []int{0, 1, 2, 3}, []int{-1, -1}, 0, true, false, false},
		{"too few for the stages", []memberState{st(5, 0)}, 2, nil, nil, 0, false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := planGeneration(tc.states, tc.p)
			if tc.wantError {
				if err == nil {
					t.Fatalf("no error, plan %+v", pl)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pl.Rank, tc.ranks) || !slices.Equal(pl.Roots, tc.roots) || pl.Step != tc.step ||
				pl.Fresh != tc.fresh || pl.FromCheckpoint != tc.fromCkpt {
				t.Fatalf("plan %+v; want ranks %v roots %v step %d fresh %v from checkpoint %v",
					pl, tc.ranks, tc.roots, tc.step, tc.fresh, tc.fromCkpt)
			}
			var lost []int
			for s, r := range pl.Roots {
				if r < 0 && !pl.Fresh {
					lost = append(lost, s)
				}
			}
			if !slices.Equal(pl.Lost, lost) {
				t.Fatalf("lost stages %v, want %v (the stages without a root)", pl.Lost, lost)
			}
			for rank, m := range pl.Members {
				if pl.Rank[m] != rank || pl.Stage[m] != rank/pl.D {
					t.Fatalf("member %d at rank %d has rank %d stage %d", m, rank, pl.Rank[m], pl.Stage[m])
				}
			}
		})
	}
}

// A member dies between the stages' updates of step 305: stage 0's
// holders applied it, stage 1's survivor did not. The stage-0 holders go
// back to 304 and the generation continues from the survivors at 304;
// without their copy from before the step, only the checkpoint is left.
func TestPlanGenerationUndoesATornStep(t *testing.T) {
	ahead := func(back bool) memberState {
		return memberState{Applied: 305, Cursor: 305 * 48, Held: 0, CanRollBack: back}
	}
	behind := memberState{Applied: 304, Cursor: 304 * 48, Held: 1, CanRollBack: true}

	pl, err := planGeneration([]memberState{ahead(true), ahead(true), behind}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Step != 304 || pl.Cursor != 304*48 || pl.FromCheckpoint || !slices.Equal(pl.Roots, []int{0, 1}) ||
		!slices.Equal(pl.RollBack, []bool{true, true, false}) || !slices.Equal(pl.Rank, []int{0, -1, 1}) {
		t.Fatalf("plan %+v; want step 304 at cursor %d from roots [0 1], members 0 and 1 rolled back, member 1 standby", pl, 304*48)
	}

	// One stage-0 holder cannot go back: it holds nothing, the other is root.
	pl, err = planGeneration([]memberState{ahead(false), ahead(true), behind, {Applied: 304, Cursor: 304 * 48, Held: 1}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Step != 304 || pl.FromCheckpoint || !slices.Equal(pl.RollBack, []bool{false, true, false, false}) ||
		pl.Members[pl.Roots[0]] != 1 {
		t.Fatalf("plan %+v; want step 304, member 1 rolled back and the root of stage 0", pl)
	}

	// No stage-0 holder can go back: the step stays torn.
	pl, err = planGeneration([]memberState{ahead(false), ahead(false), behind}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Step != 305 || !pl.FromCheckpoint || slices.Contains(pl.RollBack, true) {
		t.Fatalf("plan %+v; want step 305 from the checkpoint, nothing rolled back", pl)
	}

	// Every stage at the newest step: nothing to undo, even where members could.
	pl, err = planGeneration([]memberState{ahead(true), behind, {Applied: 305, Held: 1, CanRollBack: true}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Step != 305 || pl.FromCheckpoint || slices.Contains(pl.RollBack, true) {
		t.Fatalf("plan %+v; want step 305 from survivors, nothing rolled back", pl)
	}
}
