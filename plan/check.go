package plan

import (
	"fmt"
	"math"
	"slices"
)

// LastGeneration selects the run's last generation in CheckConfig: the
// configuration an elastic run ended in.
const LastGeneration = -1

// CheckConfig says which part of a run to check and what to model.
type CheckConfig struct {
	// Generation picks the records of one generation (one world); an
	// elastic run changes configuration between generations and each is
	// its own prediction. LastGeneration picks the last one in the file.
	Generation int64
	// Bandwidth, in bytes per second, lets the communication time be
	// predicted from grad_bytes by the ring model instead of taken from the
	// measurement. Zero means not given.
	Bandwidth float64
}

// DefaultCheckConfig checks the last generation with measured communication.
func DefaultCheckConfig() CheckConfig {
	return CheckConfig{Generation: LastGeneration}
}

// Validate reports the first input Check cannot use.
func (c CheckConfig) Validate() error {
	if c.Generation < LastGeneration {
		return fmt.Errorf("%w: generation %d must not be negative", ErrInvalidConfig, c.Generation)
	}
	if !(c.Bandwidth >= 0) || math.IsInf(c.Bandwidth, 0) {
		return fmt.Errorf("%w: bandwidth %v must be finite and not negative", ErrInvalidConfig, c.Bandwidth)
	}
	return nil
}

// Times are one step's times in milliseconds. BubbleMs is nil where a
// measurement did not report it.
type Times struct {
	StepMs    float64  `json:"step_ms"`
	ComputeMs float64  `json:"compute_ms"`
	CommMs    float64  `json:"comm_ms"`
	BubbleMs  *float64 `json:"bubble_ms,omitempty"`
}

// RelativeErrors are (predicted − measured)/measured for the times the model
// predicts rather than takes as input; each is nil where it is not defined
// (nothing measured, or the measurement was the input).
type RelativeErrors struct {
	StepMs   *float64 `json:"step_ms,omitempty"`
	CommMs   *float64 `json:"comm_ms,omitempty"`
	BubbleMs *float64 `json:"bubble_ms,omitempty"`
}

// CheckResult holds a run's medians against the model's prediction for the
// same configuration.
type CheckResult struct {
	Generation int64 `json:"generation"`
	// Steps is how many records the medians are over, from FirstStep to
	// LastStep; WarmupSkipped is 1 when the generation's first step was
	// left out (it pays for allocation and connection set-up, and is
	// skipped whenever more than two steps remain).
	Steps         int   `json:"steps"`
	WarmupSkipped int   `json:"warmup_skipped"`
	FirstStep     int64 `json:"first_step"`
	LastStep      int64 `json:"last_step"`
	// The configuration, from the last record used; 0 where the file did
	// not say. PP is 1 when absent.
	World        int   `json:"world,omitempty"`
	DP           int   `json:"dp,omitempty"`
	PP           int   `json:"pp"`
	MicroBatches int   `json:"micro_batches,omitempty"`
	GradBytes    int64 `json:"grad_bytes,omitempty"`
	// Overlap is the median overlap_fraction, 0 when the file has none.
	Overlap float64 `json:"overlap_fraction"`
	// BubbleFraction is (PP − 1)/(M + PP − 1), 0 without a pipeline.
	BubbleFraction float64 `json:"bubble_fraction"`
	// CommModelled says the predicted communication came from the ring
	// model at BandwidthBytesPerS; otherwise it is the measured median and
	// only the composition of the step is being checked.
	CommModelled       bool    `json:"comm_modelled"`
	BandwidthBytesPerS float64 `json:"bandwidth_bytes_per_s,omitempty"`
	// AchievedBusBandwidth is what the measured all-reduce reached,
	// reported as nccl-tests do: grad_bytes / comm time × 2(DP−1)/DP. It is
	// the number to pass as the bandwidth of the next plan. Present when
	// the file gives grad_bytes and DP > 1.
	AchievedBusBandwidth float64 `json:"achieved_bus_bandwidth_bytes_per_s,omitempty"`
	// PredictedExposedCommMs is (1 − overlap)·comm of the prediction.
	PredictedExposedCommMs float64        `json:"predicted_exposed_comm_ms"`
	Measured               Times          `json:"measured"`
	Predicted              Times          `json:"predicted"`
	RelativeError          RelativeErrors `json:"relative_error"`
}

// Check predicts the step time of the run in recs from its measured compute
// and communication and compares it with the measured step:
//
//	predicted step = (compute + (1 − overlap)·comm) / (1 − bubble)
//
// where bubble = (PP − 1)/(M + PP − 1) is the pipeline's idle share of the
// step, so that the predicted bubble time is bubble × predicted step. Every
// measured figure is the median over the chosen steps (medians, because one
// slow step from a GC pause or a neighbour's burst should not move the
// comparison).
func Check(recs []StepRecord, cfg CheckConfig) (CheckResult, error) {
	if err := cfg.Validate(); err != nil {
		return CheckResult{}, err
	}
	if len(recs) == 0 {
		return CheckResult{}, fmt.Errorf("%w: no records", ErrNoSteps)
	}
	gen := cfg.Generation
	if gen == LastGeneration {
		gen = recs[len(recs)-1].Generation
	}
	var sel []StepRecord
	for _, r := range recs {
		if r.Generation == gen {
			sel = append(sel, r)
		}
	}
	if len(sel) == 0 {
		return CheckResult{}, fmt.Errorf("%w: generation %d is not in the file (it has %v)", ErrNoSteps, gen, generations(recs))
	}
	res := CheckResult{Generation: gen}
	if len(sel) > 2 {
		sel = sel[1:]
		res.WarmupSkipped = 1
	}
	res.Steps = len(sel)
	res.FirstStep, res.LastStep = sel[0].Step, sel[len(sel)-1].Step

	last := sel[len(sel)-1]
	res.World, res.DP, res.PP, res.MicroBatches, res.GradBytes = last.World, last.DP, last.PP, last.MicroBatches, last.GradBytes
	if res.PP == 0 {
		res.PP = 1
	}
	if res.DP == 0 && res.World > 0 && res.World%res.PP == 0 {
		res.DP = res.World / res.PP
	}
	if res.PP > 1 {
		if res.MicroBatches == 0 {
			return CheckResult{}, fmt.Errorf("%w: line %d: pp %d without micro_batches: the bubble cannot be predicted", ErrBadMetrics, last.Line, res.PP)
		}
		res.BubbleFraction = BubbleFraction(res.PP, res.MicroBatches)
	}

	pick := func(f func(StepRecord) float64) float64 {
		v := make([]float64, len(sel))
		for i, r := range sel {
			v[i] = f(r)
		}
		return median(v)
	}
	res.Measured = Times{
		StepMs:    pick(func(r StepRecord) float64 { return r.StepMs }),
		ComputeMs: pick(func(r StepRecord) float64 { return r.ComputeMs }),
		CommMs:    pick(func(r StepRecord) float64 { return r.CommMs }),
	}
	if all(sel, func(r StepRecord) bool { return r.HasBubble }) {
		b := pick(func(r StepRecord) float64 { return r.BubbleMs })
		res.Measured.BubbleMs = &b
	}
	if all(sel, func(r StepRecord) bool { return r.HasOverlap }) {
		res.Overlap = pick(func(r StepRecord) float64 { return r.Overlap })
	}
	if res.GradBytes > 0 && res.DP > 1 && res.Measured.CommMs > 0 {
		algbw := float64(res.GradBytes) / (res.Measured.CommMs / 1e3)
		if bus := algbw * 2 * float64(res.DP-1) / float64(res.DP); !math.IsInf(bus, 0) {
			res.AchievedBusBandwidth = bus
		}
	}

	res.Predicted.ComputeMs = res.Measured.ComputeMs
	res.Predicted.CommMs = res.Measured.CommMs
	if cfg.Bandwidth > 0 {
		if res.GradBytes == 0 || res.DP == 0 {
			return CheckResult{}, fmt.Errorf("%w: modelling communication at a bandwidth needs grad_bytes and dp (or world) in the metrics", ErrBadMetrics)
		}
		c, err := CommMsFromBytes(res.GradBytes, res.DP, cfg.Bandwidth)
		if err != nil {
			return CheckResult{}, err
		}
		res.Predicted.CommMs = c
		res.CommModelled = true
		res.BandwidthBytesPerS = cfg.Bandwidth
		res.RelativeError.CommMs = relErr(c, res.Measured.CommMs)
	}
	res.PredictedExposedCommMs = (1 - res.Overlap) * res.Predicted.CommMs
	res.Predicted.StepMs = (res.Predicted.ComputeMs + res.PredictedExposedCommMs) / (1 - res.BubbleFraction)
	bubble := res.BubbleFraction * res.Predicted.StepMs
	res.Predicted.BubbleMs = &bubble
	res.RelativeError.StepMs = relErr(res.Predicted.StepMs, res.Measured.StepMs)
	if res.Measured.BubbleMs != nil && res.PP > 1 {
		res.RelativeError.BubbleMs = relErr(bubble, *res.Measured.BubbleMs)
	}
	return res, nil
}

// relErr is (predicted − measured)/measured, nil when nothing was measured
// (or so little that the ratio overflows).
func relErr(predicted, measured float64) *float64 {
	e := (predicted - measured) / measured
	if measured == 0 || math.IsInf(e, 0) || math.IsNaN(e) {
		return nil
	}
	return &e
}

// median of v (the mean of the middle two for an even count); v is sorted in
// place.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func all(recs []StepRecord, f func(StepRecord) bool) bool {
	for _, r := range recs {
		if !f(r) {
			return false
		}
	}
	return true
}

// generations lists the distinct generations in recs, sorted.
func generations(recs []StepRecord) []int64 {
	seen := map[int64]bool{}
	var g []int64
	for _, r := range recs {
		if !seen[r.Generation] {
			seen[r.Generation] = true
			g = append(g, r.Generation)
		}
	}
	slices.Sort(g)
	return g
}
