package pipeline

import (
	"errors"
	"slices"
	"testing"
)

// TestGridHandWorked: 2 replicas × 3 stages. Ranks 0,1 hold stage 0, 2,3
// stage 1, 4,5 stage 2; replica 1's pipeline is 1 → 3 → 5.
func TestGridHandWorked(t *testing.T) {
	g, err := NewGrid(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if g.Size() != 6 || g.Rank(1, 2) != 5 {
		t.Fatal(g.Size(), g.Rank(1, 2))
	}
	if !slices.Equal(g.DataGroup(1), []int{2, 3}) || !slices.Equal(g.PipelineGroup(1), []int{1, 3, 5}) {
		t.Fatal(g.DataGroup(1), g.PipelineGroup(1))
	}
}

// TestGridPartition: for every D, P ≤ 6, Coords inverts Rank and every rank
// is in exactly one data group and one pipeline group.
func TestGridPartition(t *testing.T) {
	for D := 1; D <= 6; D++ {
		for P := 1; P <= 6; P++ {
			g, _ := NewGrid(D, P)
			inData, inPipe := make([]int, g.Size()), make([]int, g.Size())
			for s := range P {
				for _, r := range g.DataGroup(s) {
					inData[r]++
					if _, st := g.Coords(r); st != s {
						t.Fatalf("D=%d P=%d: rank %d in stage %d's group has stage %d", D, P, r, s, st)
					}
				}
			}
			for d := range D {
				for s, r := range g.PipelineGroup(d) {
					inPipe[r]++
					if dd, ss := g.Coords(r); dd != d || ss != s {
						t.Fatalf("D=%d P=%d: Coords(%d) = %d, %d, want %d, %d", D, P, r, dd, ss, d, s)
					}
				}
			}
			for r := range g.Size() {
				if inData[r] != 1 || inPipe[r] != 1 {
					t.Fatalf("D=%d P=%d rank %d: in %d data groups, %d pipelines", D, P, r, inData[r], inPipe[r])
				}
			}
		}
	}
	for _, c := range [][2]int{{0, 1}, {1, 0}, {1, MaxStages + 1}} {
		if _, err := NewGrid(c[0], c[1]); !errors.Is(err, ErrBadArgument) {
			t.Fatal(c, err)
		}
	}
}
