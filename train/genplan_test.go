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
			for rank, m := range pl.Members {
				if pl.Rank[m] != rank || pl.Stage[m] != rank/pl.D {
					t.Fatalf("member %d at rank %d has rank %d stage %d", m, rank, pl.Rank[m], pl.Stage[m])
				}
			}
		})
	}
}
