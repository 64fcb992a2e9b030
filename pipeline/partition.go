package pipeline

import (
	"fmt"
	"math"
	"strconv"
)

// Range is the layers [Lo, Hi) of one stage.
type Range struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// Len is the number of layers in the range.
func (r Range) Len() int { return r.Hi - r.Lo }

// String writes the layers inclusively: "0-2" for [0, 3), "5" for [5, 6).
func (r Range) String() string {
	if r.Hi-r.Lo == 1 {
		return strconv.Itoa(r.Lo)
	}
	return strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi-1)
}

// MaxLayers bounds the layer lists Partition takes: its exact search costs
// P·n² steps, a fraction of a second for a thousand layers.
const MaxLayers = 4096

// Partition cuts layers with the given costs into P contiguous, non-empty
// stages so that the costliest stage costs as little as possible (the
// pipeline runs at the pace of its slowest stage). Among the cuts that
// reach that minimum it returns the one with the smallest sum of squared
// stage costs (the most even spread of the rest), and among those the one
// with the longest last stage, then the longest stage before it, and so
// on: the early stages stay light, which suits 1F1B, where stage 0 holds
// the most micro-batches' activations. Both searches are exact dynamic
// programmes.
//
// Costs must be finite and ≥ 0; a layer with no parameters (an activation)
// may cost 0.
func Partition(costs []float64, P int) ([]Range, error) {
	n := len(costs)
	if P < 1 || P > MaxStages {
		return nil, fmt.Errorf("%w: %d stages: want 1 to %d", ErrBadArgument, P, MaxStages)
	}
	if n > MaxLayers {
		return nil, fmt.Errorf("%w: %d layers: at most %d", ErrBadArgument, n, MaxLayers)
	}
	if n < P {
		return nil, fmt.Errorf("%w: cannot cut %d layers into %d stages: each stage needs at least one layer", ErrBadArgument, n, P)
	}
	pre := make([]float64, n+1)
	for i, c := range costs {
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return nil, fmt.Errorf("%w: layer %d costs %v: want a finite cost ≥ 0", ErrBadArgument, i, c)
		}
		pre[i+1] = pre[i] + c
	}
	if math.IsInf(pre[n], 0) {
		return nil, fmt.Errorf("%w: the layers' costs add up past the largest float64", ErrBadArgument)
	}
	// seg is the cost of layers [i, j). Prefix sums of non-negative numbers
	// never decrease, even rounded, so seg never grows as i grows, and the
	// two searches compare the very same float64 values.
	seg := func(i, j int) float64 { return pre[j] - pre[i] }
	inf := math.Inf(1)

	// Phase 1: bottleneck[j] is the least possible max stage cost of layers
	// [0, j) in k stages, for the current k.
	bottleneck := make([]float64, n+1)
	next := make([]float64, n+1)
	for j := range bottleneck {
		bottleneck[j] = inf
		if j >= 1 {
			bottleneck[j] = seg(0, j)
		}
	}
	for k := 2; k <= P; k++ {
		for j := range next {
			next[j] = inf
			for i := k - 1; i < j; i++ {
				next[j] = min(next[j], max(bottleneck[i], seg(i, j)))
			}
		}
		bottleneck, next = next, bottleneck
	}
	limit := bottleneck[n]

	// Phase 2: squares[k][j] is the least sum of squared stage costs of
	// layers [0, j) in k stages, none above limit; from[k][j] the first
	// layer of the k-th stage in that cut.
	squares := make([][]float64, P+1)
	from := make([][]int32, P+1)
	for k := range squares {
		squares[k] = make([]float64, n+1)
		from[k] = make([]int32, n+1)
		for j := range squares[k] {
			squares[k][j] = inf
		}
	}
	squares[0][0] = 0
	for k := 1; k <= P; k++ {
		for j := k; j <= n-(P-k); j++ {
			for i := k - 1; i < j; i++ {
				c := seg(i, j)
				if c > limit || squares[k-1][i] == inf {
					continue
				}
				if v := squares[k-1][i] + c*c; v < squares[k][j] {
					squares[k][j], from[k][j] = v, int32(i)
				}
			}
		}
	}
	out := make([]Range, P)
	for k, j := P, n; k >= 1; k-- {
		i := int(from[k][j])
		out[k-1] = Range{Lo: i, Hi: j}
		j = i
	}
	return out, nil
}

// StageCosts sums costs over each range.
func StageCosts(costs []float64, ranges []Range) []float64 {
	out := make([]float64, len(ranges))
	for s, r := range ranges {
		for _, c := range costs[r.Lo:r.Hi] {
			out[s] += c
		}
	}
	return out
}

// CheckRanges reports whether ranges cut layers [0, layers) into
// consecutive, non-empty stages.
func CheckRanges(ranges []Range, layers int) error {
	if len(ranges) == 0 {
		return fmt.Errorf("%w: no stages", ErrBadArgument)
	}
	next := 0
	for s, r := range ranges {
		if r.Lo != next || r.Hi <= r.Lo {
			return fmt.Errorf("%w: stage %d holds layers [%d, %d); want a non-empty range starting at layer %d", ErrBadArgument, s, r.Lo, r.Hi, next)
		}
		next = r.Hi
	}
	if next != layers {
		return fmt.Errorf("%w: the stages hold layers [0, %d), the model has %d", ErrBadArgument, next, layers)
	}
	return nil
}
