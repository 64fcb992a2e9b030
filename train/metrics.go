package train

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/troupe-ml/troupe/checkpoint"
)

// StepMetrics is one line of --metrics-out: DESIGN.md's fields first, then
// extras. Times are wall-clock milliseconds of the step on the slowest rank.
type StepMetrics struct {
	Step        int     `json:"step"`
	Loss        float64 `json:"loss"`
	LR          float64 `json:"lr"`
	SamplesPerS float64 `json:"samples_per_s"`
	TokensPerS  float64 `json:"tokens_per_s,omitempty"`
	StepMs      float64 `json:"step_ms"`
	ComputeMs   float64 `json:"compute_ms"`
	CommMs      float64 `json:"comm_ms"`
	BubbleMs    float64 `json:"bubble_ms"`
	World       int     `json:"world"`
	Generation  uint64  `json:"generation"`

	Epoch     float64 `json:"epoch"`
	Samples   int64   `json:"samples"`
	GradNorm  float64 `json:"grad_norm,omitempty"`
	Accuracy  float64 `json:"accuracy,omitempty"`
	EvalLoss  float64 `json:"eval_loss,omitempty"`
	EvalAcc   float64 `json:"eval_accuracy,omitempty"`
	DP        int     `json:"dp"`
	PP        int     `json:"pp"`
	TP        int     `json:"tp,omitempty"`
	Micro     int     `json:"micro_batches"`
	Accum     int     `json:"accum"`
	GradBytes int64   `json:"grad_bytes"`
	// OverlapFraction is the share of communication time hidden behind
	// compute (data parallel only).
	OverlapFraction float64 `json:"overlap_fraction"`
	// CkptPauseMs is the time the loop paused for a checkpoint snapshot.
	CkptPauseMs float64 `json:"ckpt_pause_ms,omitempty"`
	// PeakActBytes is the activation pool's high-water mark in this step
	// (stage 0's, with pipelining).
	PeakActBytes int64 `json:"peak_activation_bytes,omitempty"`
	// ParamBytes, GradHeldBytes and OptimizerBytes are the parameter,
	// gradient and optimizer-state bytes of the rank that holds the most
	// (a pipeline stage, a tensor-parallel shard of one, a ZeRO shard of
	// its optimizer state). GradBytes above is the whole model's gradient,
	// what data parallelism sums per step.
	ParamBytes     int64 `json:"param_bytes,omitempty"`
	GradHeldBytes  int64 `json:"grad_held_bytes,omitempty"`
	OptimizerBytes int64 `json:"optimizer_bytes,omitempty"`
	// PeakParamBytes and PeakGradBytes are the most parameter and gradient
	// bytes a rank held during the step (the three above are held between
	// steps): ZeRO-3's gathered layers and ZeRO-2's buckets in flight.
	PeakParamBytes int64 `json:"peak_param_bytes,omitempty"`
	PeakGradBytes  int64 `json:"peak_grad_bytes,omitempty"`
	// Sent*Bytes are the most bytes a rank sent in the step's collectives,
	// by kind (broadcasts are the pipeline's activations and gradients).
	SentAllReduceBytes     int64 `json:"sent_all_reduce_bytes,omitempty"`
	SentReduceScatterBytes int64 `json:"sent_reduce_scatter_bytes,omitempty"`
	SentAllGatherBytes     int64 `json:"sent_all_gather_bytes,omitempty"`
	SentBroadcastBytes     int64 `json:"sent_broadcast_bytes,omitempty"`
	// SyncBytes is the most bytes a rank sent to its part's other
	// replicas in the step: the gradient reduction (and ZeRO's gathers)
	// under --sync step, a round's average under local-sgd and diloco (0
	// between rounds). SyncRound says the step ended a round and
	// SyncRounds counts the rounds so far (local-sgd and diloco only).
	SyncBytes  int64 `json:"sync_bytes"`
	SyncRound  bool  `json:"sync_round,omitempty"`
	SyncRounds int   `json:"sync_rounds,omitempty"`
	// Async is the step's update under --sync async (absent otherwise);
	// there SyncBytes is the weights the replicas took from the
	// parameter server and the gradients they sent it for this batch,
	// the rejected ones included.
	Async *AsyncMetrics `json:"async,omitempty"`
	// StragglerRank is the replica that computed longest beside the other
	// replicas of its model part and StragglerLagMs how much longer than
	// their median (−1 and 0 without replicas to compare).
	StragglerRank  int     `json:"straggler_rank"`
	StragglerLagMs float64 `json:"straggler_lag_ms"`
	// RankComputeMs is every rank's compute time in the step, by mesh
	// rank (absent in a world of one).
	RankComputeMs []float64 `json:"rank_compute_ms,omitempty"`
	// Collectives are the step's collective operations on every rank, as
	// each completed (the collective latency histogram). They travel to an
	// elastic job's members but are not written to the metrics file (a
	// line per step stays small).
	Collectives []CollectiveTime `json:"collectives,omitempty"`
	// LossScale is the fp16 loss scale the step ran with, and Skipped
	// says its gradients overflowed and no rank updated (absent without
	// fp16). Scaler is the scaler's state after the step: it travels to
	// an elastic job's members, for a next leader to continue from, but is
	// not written to the metrics file.
	LossScale float64                 `json:"loss_scale,omitempty"`
	Skipped   bool                    `json:"skipped,omitempty"`
	Scaler    *checkpoint.ScalerState `json:"scaler,omitempty"`
	// Cursor is the sampler position of the step's global batch of Batch
	// samples (elastic jobs: the batch follows the world under linear-lr).
	Cursor uint64 `json:"cursor"`
	Batch  int    `json:"batch,omitempty"`
	// ResumeMs, on a generation's first step, is the time from the world's
	// commit to that step's end.
	ResumeMs float64 `json:"resume_ms,omitempty"`
	// PeakMicro is the most micro-batches alive at once on stage 0.
	PeakMicro int `json:"peak_micro_batches,omitempty"`
	// BubbleFraction is the measured idle share of the pipeline schedule;
	// FormulaBubble is (P − 1)/(M + P − 1) for the same P and M.
	BubbleFraction float64 `json:"bubble_fraction,omitempty"`
	FormulaBubble  float64 `json:"formula_bubble_fraction,omitempty"`
}

// CollectiveTime is one collective operation of a step on one rank.
type CollectiveTime struct {
	// Rank is the mesh rank; Kind the operation (collective.Kind's name).
	Rank    int     `json:"rank"`
	Kind    string  `json:"kind"`
	Seconds float64 `json:"seconds"`
}

// metricsWriter writes one JSON object per line.
type metricsWriter struct {
	f *os.File
	w *bufio.Writer
	e *json.Encoder
}

func newMetricsWriter(path string) (*metricsWriter, error) {
	return openMetrics(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY)
}

// appendMetricsWriter continues a metrics file (an elastic agent leads
// several generations, each appending its steps).
func appendMetricsWriter(path string) (*metricsWriter, error) {
	return openMetrics(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY)
}

func openMetrics(path string, flag int) (*metricsWriter, error) {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics %s: %w", ErrOutput, path, err)
	}
	w := bufio.NewWriter(f)
	return &metricsWriter{f: f, w: w, e: json.NewEncoder(w)}, nil
}

func (m *metricsWriter) write(v any) error {
	if s, ok := v.(StepMetrics); ok {
		s.Collectives, s.Scaler = nil, nil
		v = s
	}
	if err := m.e.Encode(v); err != nil {
		return fmt.Errorf("%w: writing metrics to %s: %w", ErrOutput, m.f.Name(), err)
	}
	if err := m.w.Flush(); err != nil {
		return fmt.Errorf("%w: writing metrics to %s: %w", ErrOutput, m.f.Name(), err)
	}
	return nil
}

func (m *metricsWriter) close() error {
	if err := m.w.Flush(); err != nil {
		m.f.Close()
		return err
	}
	return m.f.Close()
}

// AsyncMetrics is one update of asynchronous training's parameter server.
type AsyncMetrics struct {
	// Staleness is the updates the server applied between the weights the
	// gradient was computed on and this one (at most --max-staleness).
	Staleness int `json:"staleness"`
	// Rejected counts the gradients of this batch rejected as too stale
	// before this one (each computed again on fresh weights).
	Rejected int `json:"rejected"`
	// Replica is the replica whose gradient was applied.
	Replica int `json:"replica"`
}
