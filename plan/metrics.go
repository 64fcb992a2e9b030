package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// StepRecord is what Check needs from one line of a `troupe train
// --metrics-out` file. The writer owns the full record (loss, lr,
// throughput…); plan cannot import train, so it reads only these fields and
// ignores the rest.
type StepRecord struct {
	// Line is the record's 1-based line in the file, for messages.
	Line int
	// Step and Generation identify the step; Generation is 0 when absent.
	Step       int64
	Generation int64
	// StepMs, ComputeMs and CommMs are required: the wall time of the
	// step, the time spent computing, and the time spent in collectives.
	StepMs    float64
	ComputeMs float64
	CommMs    float64
	// BubbleMs is the pipeline's idle time; valid when HasBubble.
	BubbleMs  float64
	HasBubble bool
	// Overlap is the share of CommMs hidden behind compute; valid when
	// HasOverlap.
	Overlap    float64
	HasOverlap bool
	// World, DP, PP, MicroBatches and GradBytes describe the configuration;
	// 0 means absent.
	World        int
	DP           int
	PP           int
	MicroBatches int
	GradBytes    int64
}

// maxMetricsLine bounds one line of a metrics file; a real record is a few
// hundred bytes.
const maxMetricsLine = 1 << 20

// maxMillis bounds a step's times (about 31 years): larger values are
// garbage, and bounding them keeps sums and ratios finite.
const maxMillis = 1e12

// RequiredMetrics names the fields every metrics line must carry.
const RequiredMetrics = "step, step_ms, compute_ms, comm_ms"

// metricsLine mirrors the JSON fields. Numbers decode as float64 so that a
// writer emitting 1.2e9 for grad_bytes is read as well as one emitting
// 1200000000; whole-number fields are checked after.
type metricsLine struct {
	Step            *float64 `json:"step"`
	Generation      *float64 `json:"generation"`
	StepMs          *float64 `json:"step_ms"`
	ComputeMs       *float64 `json:"compute_ms"`
	CommMs          *float64 `json:"comm_ms"`
	BubbleMs        *float64 `json:"bubble_ms"`
	OverlapFraction *float64 `json:"overlap_fraction"`
	World           *float64 `json:"world"`
	DP              *float64 `json:"dp"`
	PP              *float64 `json:"pp"`
	MicroBatches    *float64 `json:"micro_batches"`
	GradBytes       *float64 `json:"grad_bytes"`
}

// ReadMetrics reads a metrics file: one JSON object per line, blank lines
// skipped. A malformed line, a line without one of RequiredMetrics, or a
// value out of range is an ErrBadMetrics error naming the line; a file with
// no records is ErrNoSteps.
func ReadMetrics(r io.Reader) ([]StepRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMetricsLine)
	var out []StepRecord
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := decodeMetricsLine(b, line)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: line %d is longer than %d bytes", ErrBadMetrics, line+1, maxMetricsLine)
		}
		return nil, fmt.Errorf("reading metrics after line %d: %w", line, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the metrics file has no records", ErrNoSteps)
	}
	return out, nil
}

func decodeMetricsLine(b []byte, line int) (StepRecord, error) {
	if b[0] != '{' {
		return StepRecord{}, fmt.Errorf("%w: line %d: want a JSON object, got %q", ErrBadMetrics, line, truncate(b, 40))
	}
	var m metricsLine
	if err := json.Unmarshal(b, &m); err != nil {
		return StepRecord{}, fmt.Errorf("%w: line %d: %v", ErrBadMetrics, line, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: line %d: "+format, append([]any{ErrBadMetrics, line}, args...)...)
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"step", m.Step}, {"step_ms", m.StepMs}, {"compute_ms", m.ComputeMs}, {"comm_ms", m.CommMs}} {
		if f.v == nil {
			return StepRecord{}, bad("missing field %q (every line needs %s)", f.name, RequiredMetrics)
		}
	}
	rec := StepRecord{Line: line}
	var err error
	whole := func(name string, v *float64, dst *int64) {
		if err != nil || v == nil {
			return
		}
		if *v < 0 || *v != math.Trunc(*v) || *v >= math.MaxInt64 {
			err = bad("%s %v: want a whole number ≥ 0", name, *v)
			return
		}
		*dst = int64(*v)
	}
	// Counts of devices and micro-batches are small; beyond maxPipelineCount
	// they are garbage, and bounding them keeps int arithmetic safe.
	count := func(name string, v *float64, dst *int) {
		var n int64
		whole(name, v, &n)
		if err == nil && n > maxPipelineCount {
			err = bad("%s %d is beyond any real run", name, n)
		}
		*dst = int(n)
	}
	millis := func(name string, v *float64, dst *float64) {
		if err != nil || v == nil {
			return
		}
		if *v < 0 {
			err = bad("%s %v must not be negative", name, *v)
			return
		}
		if *v > maxMillis {
			err = bad("%s %v is beyond any real step", name, *v)
			return
		}
		*dst = *v
	}
	whole("step", m.Step, &rec.Step)
	whole("generation", m.Generation, &rec.Generation)
	millis("step_ms", m.StepMs, &rec.StepMs)
	millis("compute_ms", m.ComputeMs, &rec.ComputeMs)
	millis("comm_ms", m.CommMs, &rec.CommMs)
	millis("bubble_ms", m.BubbleMs, &rec.BubbleMs)
	rec.HasBubble = m.BubbleMs != nil
	if err == nil && m.OverlapFraction != nil {
		if f := *m.OverlapFraction; f < 0 || f > 1 {
			err = bad("overlap_fraction %v must be between 0 and 1", f)
		}
		rec.Overlap, rec.HasOverlap = *m.OverlapFraction, true
	}
	count("world", m.World, &rec.World)
	count("dp", m.DP, &rec.DP)
	count("pp", m.PP, &rec.PP)
	count("micro_batches", m.MicroBatches, &rec.MicroBatches)
	whole("grad_bytes", m.GradBytes, &rec.GradBytes)
	if err != nil {
		return StepRecord{}, err
	}
	return rec, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
