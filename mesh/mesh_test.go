package mesh

import (
	"errors"
	"slices"
	"testing"
)

// Rank and Coord are inverse on every mesh, every rank lies in exactly one
// group per axis, and a group's ranks differ only along its axis.
func TestRankCoordAndGroups(t *testing.T) {
	for _, m := range []Mesh{{1, 1, 1}, {2, 3, 1}, {3, 2, 2}, {4, 1, 2}, {1, 5, 1}} {
		seen := map[Axis]map[int]int{PP: {}, DP: {}, TP: {}}
		for r := range m.Size() {
			c := m.Coord(r)
			if !m.Contains(c) || m.Rank(c) != r {
				t.Fatalf("%v: rank %d → %+v → %d", m, r, c, m.Rank(c))
			}
			for _, a := range []Axis{PP, DP, TP} {
				g := m.Group(a, r)
				if len(g) != m.Dim(a) || g[c.At(a)] != r {
					t.Fatalf("%v: %s group of %d is %v", m, a, r, g)
				}
				for i, q := range g {
					qc := m.Coord(q)
					if qc.At(a) != i || qc.with(a, 0) != c.with(a, 0) {
						t.Fatalf("%v: %s group of %d holds %d (%+v)", m, a, r, q, qc)
					}
				}
				seen[a][r]++
			}
		}
		for a, s := range seen {
			if len(s) != m.Size() {
				t.Fatalf("%v: %s groups cover %d ranks", m, a, len(s))
			}
		}
	}
}

// With TP = 1 the order is the one troupe has always used: rank =
// stage·D + replica.
func TestStageMajorOrder(t *testing.T) {
	m, err := Of(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Group(DP, 3); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("stage 1's data-parallel group %v, want [2 3]", got)
	}
	if got := m.Group(PP, 1); !slices.Equal(got, []int{1, 3, 5}) {
		t.Errorf("replica 1's pipeline %v, want [1 3 5]", got)
	}
	if got := m.Slice(PP, 2); !slices.Equal(got, []int{4, 5}) {
		t.Errorf("stage 2's ranks %v, want [4 5]", got)
	}
	if m.String() != "dp2×pp3" || (Mesh{1, 4, 2}).String() != "dp4×tp2" {
		t.Errorf("names %q %q", m, Mesh{1, 4, 2})
	}
}

func TestBadShapes(t *testing.T) {
	for _, m := range []Mesh{{0, 1, 1}, {1, -1, 1}, {1, 1, 0}, {MaxSize, 2, 1}} {
		if err := m.Validate(); !errors.Is(err, ErrShape) {
			t.Errorf("%+v: %v", m, err)
		}
	}
}

// Every replica holds each part once: Part and PartRank are inverse, and
// parts number stage-major.
func TestParts(t *testing.T) {
	for _, m := range []Mesh{{1, 1, 1}, {2, 3, 1}, {3, 2, 2}, {2, 2, 4}} {
		if m.Parts() != m.PP*m.TP {
			t.Fatalf("%v: %d parts", m, m.Parts())
		}
		for d := range m.DP {
			held := map[int]bool{}
			for part := range m.Parts() {
				r := m.PartRank(part, d)
				c := m.Coord(r)
				if m.Part(r) != part || c.DP != d || c.PP != part/m.TP || c.TP != part%m.TP {
					t.Fatalf("%v: part %d of replica %d is rank %d (%+v, part %d)", m, part, d, r, c, m.Part(r))
				}
				held[r] = true
			}
			if !slices.Equal(m.Slice(DP, d), sortedKeys(held)) {
				t.Fatalf("%v: replica %d's parts are on %v, its ranks are %v", m, d, sortedKeys(held), m.Slice(DP, d))
			}
		}
	}
}

func sortedKeys(s map[int]bool) []int {
	var out []int
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Slots under ZeRO shard groups: every rank holds one slot, each slot is
// held once per shard group, and a slot's holders are one part's replicas
// at the same place in their groups.
func TestSlots(t *testing.T) {
	for _, tc := range []struct {
		m Mesh
		s int
	}{{Mesh{DP: 4, PP: 1, TP: 1}, 2}, {Mesh{DP: 4, PP: 2, TP: 1}, 4}, {Mesh{DP: 6, PP: 2, TP: 2}, 3}, {Mesh{DP: 2, PP: 2, TP: 1}, 1}, {Mesh{DP: 3, PP: 1, TP: 2}, 0}} {
		s := max(1, tc.s)
		m := tc.m
		holders := make([][]int, m.Slots(tc.s))
		for r := range m.Size() {
			sl := m.Slot(r, tc.s)
			holders[sl] = append(holders[sl], r)
		}
		for sl, rs := range holders {
			if len(rs) != m.DP/s {
				t.Fatalf("%v, groups of %d: slot %d held by %v, want one rank per group", m, s, sl, rs)
			}
			for g, r := range rs {
				c := m.Coord(r)
				if m.SlotRank(sl, g, tc.s) != r || m.Part(r) != sl/s || c.DP != g*s+sl%s {
					t.Fatalf("%v, groups of %d: slot %d's holder in group %d is rank %d (%+v), SlotRank says %d", m, s, sl, g, r, c, m.SlotRank(sl, g, tc.s))
				}
			}
		}
	}
}
