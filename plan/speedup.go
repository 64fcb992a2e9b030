package plan

import (
	"fmt"
	"math"
)

// SpeedupConfig describes one data-parallel step: every rank computes its
// share of the global batch, then the gradients are all-reduced, part of
// which may hide behind the backward pass (DDP's bucketed overlap).
type SpeedupConfig struct {
	// Ranks is the number of data-parallel ranks P.
	Ranks int
	// ComputeMs is one rank's forward+backward+optimizer time T per step,
	// in milliseconds.
	ComputeMs float64
	// CommMs is the all-reduce time C per step in milliseconds; see
	// CommMsFromBytes to derive it from a gradient size and a bandwidth.
	CommMs float64
	// Overlap is the fraction F of the communication hidden behind compute,
	// 0 (none) to 1 (all).
	Overlap float64
	// SyncEvery is H of synchronisation in rounds (--sync local-sgd or
	// diloco --sync-every H): the replicas exchange once every H steps,
	// at the round's last step, which waits for it (no overlap), so a step
	// pays C/H on average. 0 or 1: every step (--sync step).
	SyncEvery int
}

// DefaultSpeedupConfig returns p ranks of t ms compute and c ms
// communication with nothing overlapped.
func DefaultSpeedupConfig(p int, t, c float64) SpeedupConfig {
	return SpeedupConfig{Ranks: p, ComputeMs: t, CommMs: c}
}

// Validate reports the first input the model cannot use.
func (c SpeedupConfig) Validate() error {
	if c.Ranks <= 0 {
		return fmt.Errorf("%w: ranks %d must be positive", ErrInvalidConfig, c.Ranks)
	}
	if !(c.ComputeMs > 0) || math.IsInf(c.ComputeMs, 0) {
		return fmt.Errorf("%w: compute time %v ms must be positive and finite", ErrInvalidConfig, c.ComputeMs)
	}
	if !(c.CommMs >= 0) || math.IsInf(c.CommMs, 0) {
		return fmt.Errorf("%w: communication time %v ms must be finite and not negative", ErrInvalidConfig, c.CommMs)
	}
	if !(c.Overlap >= 0 && c.Overlap <= 1) {
		return fmt.Errorf("%w: overlap %v must be between 0 and 1", ErrInvalidConfig, c.Overlap)
	}
	if c.SyncEvery < 0 {
		return fmt.Errorf("%w: sync every %d steps: want 1 or more (0: every step)", ErrInvalidConfig, c.SyncEvery)
	}
	if c.SyncEvery > 1 && c.Overlap > 0 {
		return fmt.Errorf("%w: overlap %v with a round every %d steps: a round's exchange waits for its last step, nothing hides it", ErrInvalidConfig, c.Overlap, c.SyncEvery)
	}
	return nil
}

// SpeedupResult compares P ranks against one device doing the same global
// batch. Times are in milliseconds.
type SpeedupResult struct {
	Ranks     int     `json:"ranks"`
	ComputeMs float64 `json:"compute_ms"`
	CommMs    float64 `json:"comm_ms"`
	Overlap   float64 `json:"overlap"`
	// SyncEvery is H (1: every step).
	SyncEvery int `json:"sync_every"`
	// ExposedCommMs is (1 − F)·C/H, the communication a step waits for
	// (on average, with rounds).
	ExposedCommMs float64 `json:"exposed_comm_ms"`
	// StepMs is T + (1 − F)·C/H, one data-parallel step.
	StepMs float64 `json:"step_ms"`
	// SerialMs is P·T: one device working through all P shares.
	SerialMs float64 `json:"serial_ms"`
	// Speedup is SerialMs / StepMs and Efficiency Speedup / P.
	Speedup    float64 `json:"speedup"`
	Efficiency float64 `json:"efficiency"`
	// GradBytes and BandwidthBytesPerS are set by the caller when CommMs
	// was derived from them (see CommMsFromBytes).
	GradBytes          int64   `json:"grad_bytes,omitempty"`
	BandwidthBytesPerS float64 `json:"bandwidth_bytes_per_s,omitempty"`
}

// Speedup computes the data-parallel speedup of cfg.
func Speedup(cfg SpeedupConfig) (SpeedupResult, error) {
	if err := cfg.Validate(); err != nil {
		return SpeedupResult{}, err
	}
	h := max(1, cfg.SyncEvery)
	r := SpeedupResult{
		Ranks:         cfg.Ranks,
		ComputeMs:     cfg.ComputeMs,
		CommMs:        cfg.CommMs,
		Overlap:       cfg.Overlap,
		SyncEvery:     h,
		ExposedCommMs: (1 - cfg.Overlap) * cfg.CommMs / float64(h),
		SerialMs:      float64(cfg.Ranks) * cfg.ComputeMs,
	}
	r.StepMs = cfg.ComputeMs + r.ExposedCommMs
	r.Speedup = r.SerialMs / r.StepMs
	r.Efficiency = r.Speedup / float64(cfg.Ranks)
	return r, nil
}

// CommMsFromBytes is the time in milliseconds of a ring all-reduce of
// gradBytes over ranks at bandwidth bytes per second.
func CommMsFromBytes(gradBytes int64, ranks int, bandwidth float64) (float64, error) {
	if !(bandwidth > 0) {
		return 0, fmt.Errorf("%w: bandwidth %v must be positive", ErrInvalidConfig, bandwidth)
	}
	r, err := AllReduce(AllReduceConfig{Bytes: gradBytes, Ranks: ranks, Bandwidth: bandwidth, Algorithm: Ring})
	if err != nil {
		return 0, err
	}
	return *r.Seconds * 1e3, nil
}
