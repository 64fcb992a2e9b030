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
		secs := make([]float64, len(s))
		for j, d := range s {
			secs[j] = d.Seconds()
		}
		med := median(secs)
		out[i] = med
	}
	return out, nil
}

// EstimateCosts reads per-stage op times back from a timeline (a real
// step's, from a Recorder): for each stage the median length of its
// forward, backward, recompute, send and receive spans (0 where it has
// none). Simulating the schedule under these costs gives the bubble the
// schedule itself would cause with those stage speeds, a closer reference
// for a measured bubble than FormulaBubble when the stages are not equal.
// Latency is left 0: a receive's span starts when the stage takes the
// message, which says nothing about when it arrived. Memory is not
// estimated.
func EstimateCosts(tl *Timeline) Costs {
	c := Costs{Stages: make([]StageCost, tl.Stages())}
	for s, spans := range tl.Spans {
		var d [numOpKinds][]float64
		for _, sp := range spans {
			if sp.Kind < numOpKinds {
				d[sp.Kind] = append(d[sp.Kind], sp.End-sp.Start)
			}
		}
		c.Stages[s] = StageCost{
			Forward:   median(d[Forward]),
			Backward:  median(d[Backward]),
			Recompute: median(d[Recompute]),
			Send:      median(slices.Concat(d[SendAct], d[SendGrad])),
			Recv:      median(slices.Concat(d[RecvAct], d[RecvGrad])),
		}
	}
	return c
}

// median of v (0 for none); v is reordered.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2
	}
	return v[m]
}
