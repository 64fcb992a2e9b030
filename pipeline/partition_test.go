package pipeline

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// compositions calls fn with every cut of n layers into P non-empty
// contiguous stages.
func compositions(n, P int, fn func([]Range)) {
	var rec func(lo, k int, acc []Range)
	rec = func(lo, k int, acc []Range) {
		if k == 1 {
			fn(append(acc, Range{lo, n}))
			return
		}
		for hi := lo + 1; hi <= n-(k-1); hi++ {
			rec(hi, k-1, append(acc, Range{lo, hi}))
		}
	}
	rec(0, P, nil)
}

// naiveCosts sums each stage's costs directly (a different order of
// additions from Partition's prefix sums).
func naiveCosts(costs []float64, r []Range) (maxc, sq float64) {
	for _, x := range r {
		var c float64
		for i := x.Lo; i < x.Hi; i++ {
			c += costs[i]
		}
		maxc = max(maxc, c)
		sq += c * c
	}
	return maxc, sq
}

// TestPartitionBruteForce: for random layer costs (whole numbers, so that
// every sum is exact and brute force and Partition agree bit for bit) and
// every n ≤ 9, P ≤ n, Partition's cut has the least possible max stage
// cost, and among those cuts the least sum of squares.
func TestPartitionBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for trial := range 150 {
		n := 1 + rng.IntN(9)
		costs := make([]float64, n)
		for i := range costs {
			costs[i] = float64(rng.IntN(20)) // zeros included: parameter-free layers
		}
		for P := 1; P <= n; P++ {
			got, err := Partition(costs, P)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckRanges(got, n); err != nil || len(got) != P {
				t.Fatalf("costs %v P %d: %v (%v)", costs, P, got, err)
			}
			bestMax, bestSq := math.Inf(1), math.Inf(1)
			compositions(n, P, func(r []Range) {
				m, _ := naiveCosts(costs, r)
				bestMax = min(bestMax, m)
			})
			compositions(n, P, func(r []Range) {
				if m, sq := naiveCosts(costs, r); m == bestMax {
					bestSq = min(bestSq, sq)
				}
			})
			gm, gsq := naiveCosts(costs, got)
			if gm != bestMax || gsq != bestSq {
				t.Fatalf("trial %d costs %v P %d: cut %v has max %v, sq %v; best %v, %v", trial, costs, P, got, gm, gsq, bestMax, bestSq)
			}
		}
	}
}

// TestPartitionFloatCosts: with fractional costs (measured times) the max
// stage cost is the brute-force optimum within 1e-12 relative (the two add
// in different orders).
func TestPartitionFloatCosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for range 100 {
		n := 2 + rng.IntN(7)
		costs := make([]float64, n)
		for i := range costs {
			costs[i] = rng.Float64() * 1e-3
		}
		P := 1 + rng.IntN(n)
		got, err := Partition(costs, P)
		if err != nil {
			t.Fatal(err)
		}
		best := math.Inf(1)
		compositions(n, P, func(r []Range) {
			m, _ := naiveCosts(costs, r)
			best = min(best, m)
		})
		if gm, _ := naiveCosts(costs, got); math.Abs(gm-best) > 1e-12*best {
			t.Fatalf("costs %v P %d: max %v, best %v", costs, P, gm, best)
		}
	}
}

func TestPartitionHandWorked(t *testing.T) {
	cases := []struct {
		costs []float64
		P     int
		want  string
	}{
		// Nine equal layers on 4 stages: max 3 is forced; squares prefer
		// 2,2,2,3 (sum 21) over 1,2,3,3 (23); among the equal spreads the
		// extra layer goes last.
		{[]float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, "2,2,2,3"},
		// A GPT-like list: a heavy embedding, four blocks, a heavy head.
		// 1,3,2 gives stage costs 8, 9, 11 (squares 266) and beats 2,2,2
		// (11, 6, 11: 278) at the same max 11.
		{[]float64{8, 3, 3, 3, 3, 8}, 3, "1,3,2"},
		{[]float64{8, 3, 3, 3, 3, 8}, 2, "3,3"},
		// Parameter-free activations cost nothing but each stage needs a
		// layer.
		{[]float64{5, 0, 5, 0, 5}, 3, "1,2,2"},
		{[]float64{4}, 1, "1"},
	}
	for _, c := range cases {
		got, err := Partition(c.costs, c.P)
		if err != nil {
			t.Fatal(err)
		}
		if s := FormatStageLayers(got); s != c.want {
			t.Errorf("%v into %d: %s, want %s", c.costs, c.P, s, c.want)
		}
	}
}

func TestPartitionErrors(t *testing.T) {
	cases := []struct {
		costs []float64
		P     int
		text  string
	}{
		{[]float64{1, 2}, 3, "cannot cut 2 layers into 3 stages"},
		{[]float64{1, 2}, 0, "0 stages"},
		{[]float64{1, -2}, 1, "layer 1 costs -2"},
		{[]float64{math.NaN()}, 1, "layer 0 costs NaN"},
		{[]float64{math.Inf(1)}, 1, "layer 0 costs +Inf"},
		{[]float64{math.MaxFloat64, math.MaxFloat64}, 1, "past the largest float64"},
		{make([]float64, MaxLayers+1), 2, "at most 4096"},
	}
	for _, c := range cases {
		if _, err := Partition(c.costs, c.P); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%v P %d: %v, want mention of %q", c.costs[:min(len(c.costs), 3)], c.P, err, c.text)
		}
	}
}

func TestRanges(t *testing.T) {
	r := []Range{{0, 3}, {3, 4}, {4, 8}}
	if err := CheckRanges(r, 8); err != nil {
		t.Fatal(err)
	}
	if s := []string{r[0].String(), r[1].String()}; !slices.Equal(s, []string{"0-2", "3"}) {
		t.Fatal(s)
	}
	if got := StageCosts([]float64{1, 2, 3, 4, 5, 6, 7, 8}, r); !slices.Equal(got, []float64{6, 4, 26}) {
		t.Fatal(got)
	}
	for _, bad := range []struct {
		r      []Range
		layers int
		text   string
	}{
		{nil, 3, "no stages"},
		{[]Range{{0, 2}, {3, 4}}, 4, "starting at layer 2"},
		{[]Range{{0, 2}, {2, 2}}, 2, "non-empty"},
		{[]Range{{0, 2}}, 3, "the model has 3"},
	} {
		if err := CheckRanges(bad.r, bad.layers); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), bad.text) {
			t.Errorf("%v: %v", bad.r, err)
		}
	}
}
