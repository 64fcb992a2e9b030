package train

import (
	"fmt"
	"math"
	"slices"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// The leader's reports (workerpb.Progress) carry StepMetrics and WorldInfo
// field for field; this file is the one place each is converted. A
// converter from the wire checks what the Go value cannot hold (a count
// beyond int, a negative step or size) and never panics: the bytes come
// from a peer. Slices are copied from the wire: in one process a message
// passes by pointer to every member.

// progressOf reads a leader's report: exactly one of the world and the
// step's metrics, or an error wrapping ErrWire that says what is wrong.
func progressOf(p *workerpb.Progress) (*WorldInfo, *StepMetrics, error) {
	switch r := p.GetReport().(type) {
	case *workerpb.Progress_World:
		w, err := worldInfoOf(r.World)
		if err != nil {
			return nil, nil, err
		}
		return &w, nil, nil
	case *workerpb.Progress_Metrics:
		m, err := stepMetricsOf(r.Metrics)
		if err != nil {
			return nil, nil, err
		}
		if uint64(m.Step) != p.GetStep() {
			return nil, nil, fmt.Errorf("%w: a report of step %d carries the metrics of step %d", ErrWire, p.GetStep(), m.Step)
		}
		return nil, &m, nil
	default:
		return nil, nil, fmt.Errorf("%w: a report with neither a world nor a step's metrics", ErrWire)
	}
}

// worldInfoMsg is w on the wire.
func worldInfoMsg(w WorldInfo) *workerpb.WorldInfo {
	return &workerpb.WorldInfo{Generation: w.Generation, Mesh: w.Mesh, Dp: int64(w.DP), Pp: int64(w.PP),
		Members: w.Members, Standby: w.Standby, Step: int64(w.Step), StateFrom: w.StateFrom}
}

// worldInfoOf reads a WorldInfo from the wire.
func worldInfoOf(p *workerpb.WorldInfo) (WorldInfo, error) {
	if p == nil {
		return WorldInfo{}, fmt.Errorf("%w: no world", ErrWire)
	}
	var d wireInts
	w := WorldInfo{Generation: p.Generation, Mesh: p.Mesh, DP: d.count("dp", p.Dp), PP: d.count("pp", p.Pp),
		Members: slices.Clone(p.Members), Standby: slices.Clone(p.Standby), Step: d.count("step", p.Step), StateFrom: p.StateFrom}
	if d.err != nil {
		return WorldInfo{}, fmt.Errorf("%w: world of generation %d: %w", ErrWire, p.Generation, d.err)
	}
	return w, nil
}

// stepMetricsMsg is m on the wire.
func stepMetricsMsg(m StepMetrics) *workerpb.StepMetrics {
	p := &workerpb.StepMetrics{
		Step: int64(m.Step), Loss: m.Loss, Lr: m.LR, SamplesPerS: m.SamplesPerS, TokensPerS: m.TokensPerS,
		StepMs: m.StepMs, ComputeMs: m.ComputeMs, CommMs: m.CommMs, BubbleMs: m.BubbleMs,
		World: int64(m.World), Generation: m.Generation,
		Epoch: m.Epoch, Samples: m.Samples, GradNorm: m.GradNorm, Accuracy: m.Accuracy, EvalLoss: m.EvalLoss, EvalAccuracy: m.EvalAcc,
		Dp: int64(m.DP), Pp: int64(m.PP), Tp: int64(m.TP), MicroBatches: int64(m.Micro), Accum: int64(m.Accum),
		GradBytes: m.GradBytes, OverlapFraction: m.OverlapFraction, CkptPauseMs: m.CkptPauseMs, PeakActivationBytes: m.PeakActBytes,
		ParamBytes: m.ParamBytes, GradHeldBytes: m.GradHeldBytes, OptimizerBytes: m.OptimizerBytes,
		PeakParamBytes: m.PeakParamBytes, PeakGradBytes: m.PeakGradBytes,
		SentAllReduceBytes: m.SentAllReduceBytes, SentReduceScatterBytes: m.SentReduceScatterBytes,
		SentAllGatherBytes: m.SentAllGatherBytes, SentBroadcastBytes: m.SentBroadcastBytes,
		SyncBytes: m.SyncBytes, SyncRound: m.SyncRound, SyncRounds: int64(m.SyncRounds),
		StragglerRank: int64(m.StragglerRank), StragglerLagMs: m.StragglerLagMs, RankComputeMs: m.RankComputeMs,
		LossScale: m.LossScale, Skipped: m.Skipped, Cursor: m.Cursor, Batch: int64(m.Batch), ResumeMs: m.ResumeMs,
		PeakMicroBatches: int64(m.PeakMicro), BubbleFraction: m.BubbleFraction, FormulaBubbleFraction: m.FormulaBubble,
	}
	if a := m.Async; a != nil {
		p.Async = &workerpb.AsyncMetrics{Staleness: int64(a.Staleness), Rejected: int64(a.Rejected), Replica: int64(a.Replica)}
	}
	if len(m.Collectives) > 0 {
		p.Collectives = make([]*workerpb.CollectiveTime, len(m.Collectives))
		for i, c := range m.Collectives {
			p.Collectives[i] = &workerpb.CollectiveTime{Rank: int64(c.Rank), Kind: c.Kind, Seconds: c.Seconds}
		}
	}
	if s := m.Scaler; s != nil {
		p.Scaler = &workerpb.ScalerState{Scale: s.Scale, GrowthFactor: s.GrowthFactor, BackoffFactor: s.BackoffFactor,
			GrowthInterval: int64(s.GrowthInterval), GrowthTracker: int64(s.GrowthTracker)}
	}
	return p
}

// stepMetricsOf reads a step's metrics from the wire.
func stepMetricsOf(p *workerpb.StepMetrics) (StepMetrics, error) {
	if p == nil {
		return StepMetrics{}, fmt.Errorf("%w: no step metrics", ErrWire)
	}
	var d wireInts
	m := StepMetrics{
		Step: d.count("step", p.Step), Loss: p.Loss, LR: p.Lr, SamplesPerS: p.SamplesPerS, TokensPerS: p.TokensPerS,
		StepMs: p.StepMs, ComputeMs: p.ComputeMs, CommMs: p.CommMs, BubbleMs: p.BubbleMs,
		World: d.count("world", p.World), Generation: p.Generation,
		Epoch: p.Epoch, Samples: p.Samples, GradNorm: p.GradNorm, Accuracy: p.Accuracy, EvalLoss: p.EvalLoss, EvalAcc: p.EvalAccuracy,
		DP: d.count("dp", p.Dp), PP: d.count("pp", p.Pp), TP: d.count("tp", p.Tp), Micro: d.count("micro_batches", p.MicroBatches),
		Accum: d.count("accum", p.Accum), GradBytes: p.GradBytes, OverlapFraction: p.OverlapFraction, CkptPauseMs: p.CkptPauseMs,
		PeakActBytes: p.PeakActivationBytes, ParamBytes: p.ParamBytes, GradHeldBytes: p.GradHeldBytes, OptimizerBytes: p.OptimizerBytes,
		PeakParamBytes: p.PeakParamBytes, PeakGradBytes: p.PeakGradBytes,
		SentAllReduceBytes: p.SentAllReduceBytes, SentReduceScatterBytes: p.SentReduceScatterBytes,
		SentAllGatherBytes: p.SentAllGatherBytes, SentBroadcastBytes: p.SentBroadcastBytes,
		SyncBytes: p.SyncBytes, SyncRound: p.SyncRound, SyncRounds: d.count("sync_rounds", p.SyncRounds),
		StragglerRank: d.int("straggler_rank", p.StragglerRank), StragglerLagMs: p.StragglerLagMs, RankComputeMs: slices.Clone(p.RankComputeMs),
		LossScale: p.LossScale, Skipped: p.Skipped, Cursor: p.Cursor, Batch: d.count("batch", p.Batch), ResumeMs: p.ResumeMs,
		PeakMicro: d.count("peak_micro_batches", p.PeakMicroBatches), BubbleFraction: p.BubbleFraction, FormulaBubble: p.FormulaBubbleFraction,
	}
	if a := p.Async; a != nil {
		m.Async = &AsyncMetrics{Staleness: d.count("async.staleness", a.Staleness), Rejected: d.count("async.rejected", a.Rejected),
			Replica: d.count("async.replica", a.Replica)}
	}
	if len(p.Collectives) > 0 {
		m.Collectives = make([]CollectiveTime, len(p.Collectives))
		for i, c := range p.Collectives {
			m.Collectives[i] = CollectiveTime{Rank: d.count("collectives.rank", c.GetRank()), Kind: c.GetKind(), Seconds: c.GetSeconds()}
		}
	}
	if s := p.Scaler; s != nil {
		m.Scaler = &checkpoint.ScalerState{Scale: s.Scale, GrowthFactor: s.GrowthFactor, BackoffFactor: s.BackoffFactor,
			GrowthInterval: d.int("scaler.growth_interval", s.GrowthInterval), GrowthTracker: d.int("scaler.growth_tracker", s.GrowthTracker)}
	}
	if d.err != nil {
		return StepMetrics{}, fmt.Errorf("%w: metrics of step %d: %w", ErrWire, p.Step, d.err)
	}
	return m, nil
}

// wireInts converts a message's integers to int, keeping the first that
// does not fit.
type wireInts struct{ err error }

// int is v as an int.
func (d *wireInts) int(field string, v int64) int {
	if v < math.MinInt || v > math.MaxInt {
		d.fail(fmt.Errorf("%s %d is out of range", field, v))
		return 0
	}
	return int(v)
}

// count is v as an int that may not be negative (a step, a size, a rank).
func (d *wireInts) count(field string, v int64) int {
	if v < 0 {
		d.fail(fmt.Errorf("%s %d is negative", field, v))
		return 0
	}
	return d.int(field, v)
}

func (d *wireInts) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}
