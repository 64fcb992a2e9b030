package pipeline

import (
	"fmt"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/nn"
)

// LayerParams counts the parameters (elements) of each of m's layers, in
// order. A parameter two layers share (a GPT's tied embedding and head) is
// counted in both: each stage holding one of those layers keeps a copy of
// it, computes with it and must have its gradient summed with the other's.
func LayerParams(m *nn.Model) []int {
	out := make([]int, len(m.Layers))
	for i, l := range m.Layers {
		for _, p := range l.Params() {
			out[i] += p.Size()
		}
	}
	return out
}

// ParamCosts turns parameter counts into Partition costs: balancing
// parameters balances weight, gradient and optimizer memory, and for
// dense layers the compute, which grows with rows × parameters.
func ParamCosts(counts []int) ([]float64, error) {
	out := make([]float64, len(counts))
	for i, c := range counts {
		if c < 0 {
			return nil, fmt.Errorf("%w: layer %d has %d parameters", ErrBadArgument, i, c)
		}
		out[i] = float64(c)
	}
	return out, nil
}

// TimeCosts turns measured per-layer times into Partition costs: for each
// layer the median of its samples (forward plus backward of one
// micro-batch, say), in seconds. The median keeps one preempted sample from
// moving a cut. Every layer needs at least one sample, none negative.
func TimeCosts(samples [][]time.Duration) ([]float64, error) {
	out := make([]float64, len(samples))
	for i, s := range samples {
		if len(s) == 0 {
			return nil, fmt.Errorf("%w: layer %d has no time samples", ErrBadArgument, i)
		}
		s = slices.Clone(s)
		slices.Sort(s)
		if s[0] < 0 {
			return nil, fmt.Errorf("%w: layer %d has a negative time %v", ErrBadArgument, i, s[0])
		}
		mid := len(s) / 2
		med := s[mid].Seconds()
		if len(s)%2 == 0 {
			med = (s[mid-1].Seconds() + s[mid].Seconds()) / 2
		}
		out[i] = med
	}
	return out, nil
}
