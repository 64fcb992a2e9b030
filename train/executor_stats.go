package train

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/trace"
	"github.com/troupe-ml/troupe/train/leader"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// aggregateStep combines the ranks' answers to one step on mesh m: the
// loss and targets summed, the slowest rank's times, the share of
// communication hidden, stage 0's memory and gradient norm, the measured
// bubble of a pipeline, and (when checksum) the check that the replicas
// of each stage hold the same bits.
func aggregateStep(m mesh.Mesh, zeroShards int, dones []*workerpb.StepDone, step int, checksum bool) (stepStats, error) {
	var st stepStats
	var hidden float64
	for _, d := range dones {
		st.LossSum += d.LossSum
		st.Targets += int(d.Targets)
		st.Correct += int(d.Correct)
		st.ComputeMs = math.Max(st.ComputeMs, d.ComputeMs)
		st.ParamBytes = max(st.ParamBytes, d.ParamBytes)
		st.GradHeldBytes = max(st.GradHeldBytes, d.GradHeldBytes)
		st.OptimBytes = max(st.OptimBytes, d.OptimizerBytes)
		st.PeakParamBytes = max(st.PeakParamBytes, d.PeakParamBytes)
		st.PeakGradBytes = max(st.PeakGradBytes, d.PeakGradBytes)
		st.Sent.AllReduce = max(st.Sent.AllReduce, d.SentAllReduceBytes)
		st.Sent.ReduceScatter = max(st.Sent.ReduceScatter, d.SentReduceScatterBytes)
		st.Sent.AllGather = max(st.Sent.AllGather, d.SentAllGatherBytes)
		st.Sent.Broadcast = max(st.Sent.Broadcast, d.SentBroadcastBytes)
		st.SyncBytes = max(st.SyncBytes, d.SyncBytes)
		st.CommMs = math.Max(st.CommMs, d.CommMs)
		if d.CommMs > 0 {
			hidden += 1 - d.ExposedCommMs/d.CommMs
		}
	}
	st.Overlap = hidden / float64(len(dones))
	st.GradNorm = dones[0].GradNorm
	st.Skipped = dones[0].Skipped
	for r, d := range dones {
		if d.Skipped != st.Skipped {
			return st, fmt.Errorf("%w: rank %d skipped step %d and rank 0 did not, or the other way round", ErrInternal, r, step+1)
		}
	}
	st.PeakAct = dones[0].PeakActivationBytes
	st.PeakMicro = int(dones[0].PeakMicroBatches)
	if m.PP > 1 {
		st.BubbleFraction, st.BubbleMs = measuredBubble(m, dones)
	}
	st.StragglerRank, st.StragglerLagMs = straggler(m, func(r int) float64 { return dones[r].ComputeMs })
	if len(dones) > 1 {
		st.RankComputeMs = make([]float64, len(dones))
		for r, d := range dones {
			st.RankComputeMs[r] = d.ComputeMs
		}
	}
	for r, d := range dones {
		for _, op := range d.Collectives {
			st.Collectives = append(st.Collectives, CollectiveTime{Rank: r, Kind: collective.Kind(op.Kind).String(), Seconds: op.Seconds})
		}
	}
	if checksum {
		if err := leader.CheckReplicas(m, zeroShards, step+1, func(r int) uint64 { return dones[r].Checksum }); err != nil {
			return st, err
		}
	}
	return st, nil
}

// straggler finds the replica that computed longest beside the other
// replicas of its model part (the same work on the same number of rows,
// give or take one), and by how much it passed their lower median: −1 and
// 0 when no part has two replicas. Pipeline stages and tensor-parallel
// shards are not compared with each other: they do different work.
func straggler(m mesh.Mesh, compute func(rank int) float64) (rank int, lagMs float64) {
	rank = -1
	if m.DP < 2 {
		return rank, 0
	}
	ts := make([]float64, m.DP)
	for p := range m.Parts() {
		for d := range m.DP {
			ts[d] = compute(m.PartRank(p, d))
		}
		sorted := slices.Clone(ts)
		slices.Sort(sorted)
		med := sorted[(len(sorted)-1)/2]
		for d, t := range ts {
			if lag := t - med; lag > lagMs {
				rank, lagMs = m.PartRank(p, d), lag
			}
		}
	}
	return rank, lagMs
}

// measuredBubble is the idle share of the pipeline schedule, averaged over
// replicas: 1 − Σ_s busy_s / (P × the slowest stage's schedule time), and
// the idle time per stage that it means.
func measuredBubble(m mesh.Mesh, dones []*workerpb.StepDone) (frac, idleMs float64) {
	for d := range m.DP {
		var busy, span float64
		for _, r := range m.Group(mesh.PP, m.Rank(mesh.Coord{DP: d})) {
			busy += dones[r].ComputeMs
			span = math.Max(span, dones[r].ScheduleMs)
		}
		if span > 0 {
			f := 1 - busy/(float64(m.PP)*span)
			frac += f / float64(m.DP)
			idleMs += f * span / float64(m.DP)
		}
	}
	return frac, idleMs
}

// tracer writes --trace: every step's timeline of each replica's pipeline,
// from the recorders of in-process stages, or from what the stages of
// worker processes shipped in their answers.
type tracer struct {
	m    mesh.Mesh
	w    *trace.Writer
	path string
	// recorders are the in-process replicas' (nil: the stages ship).
	recorders []*pipeline.Recorder
}

// newTracer traces a pipeline world m from origin; with local set, one
// recorder per replica, which its stages share.
func newTracer(m mesh.Mesh, path string, origin time.Time, local bool) (*tracer, error) {
	t := &tracer{m: m, w: trace.NewWriter(origin), path: path}
	if local {
		for range m.DP {
			rec, err := pipeline.NewRecorder(m.PP, origin)
			if err != nil {
				return nil, err
			}
			t.recorders = append(t.recorders, rec)
		}
	}
	return t, nil
}

// step adds one step of every replica to the trace.
func (t *tracer) step(dones []*workerpb.StepDone) error {
	for d := range t.m.DP {
		var tl *pipeline.Timeline
		if t.recorders != nil {
			tl = t.recorders[d].Take()
		} else {
			tl = pipeline.NewTimeline(t.m.PP, "s")
			for st, r := range t.m.Group(mesh.PP, t.m.Rank(mesh.Coord{DP: d})) {
				spans, mem, err := worker.StageTrace(dones[r])
				if err != nil {
					return fmt.Errorf("train: trace: %w", err)
				}
				tl.Spans[st], tl.Mem[st] = spans, mem
			}
		}
		if err := tl.WriteTrace(t.w, pipeline.TraceOptions{Pid: d, Process: fmt.Sprintf("replica %d", d), Scale: 1e6}); err != nil {
			return fmt.Errorf("train: trace: %w", err)
		}
	}
	return nil
}

// close writes the trace file.
func (t *tracer) close() error {
	if err := t.w.WriteFile(t.path); err != nil {
		return fmt.Errorf("%w: trace %s: %w", ErrOutput, t.path, err)
	}
	return nil
}
