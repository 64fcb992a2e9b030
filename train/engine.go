package train

import (
	"io"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/replica"
)

// stepStats is what one optimizer step reports to the loop.
type stepStats struct {
	replica.Result
	GradNorm  float64
	ComputeMs float64
	CommMs    float64
	BubbleMs  float64
	// Overlap is the share of communication hidden behind compute.
	Overlap    float64
	World      int
	Generation uint64
	PeakAct    int64
	// PeakMicro is the most micro-batches alive at once on stage 0;
	// BubbleFraction the measured idle share of the pipeline schedule.
	PeakMicro      int
	BubbleFraction float64
}

// engine runs optimizer steps on a global batch: one replica here, a world
// of worker actors in the data-parallel and pipeline engines.
//
// step runs optimizer step number step (0-based) on the global batch that
// starts at sampler cursor cur; b holds that batch, filled by the loop
// (engines that read their rows themselves use it only for its size).
// eval runs held-out samples [lo, hi). weights returns the parameters.
type engine interface {
	step(step int, cur data.Cursor, b *data.Batch, lr float64, checksum bool) (stepStats, error)
	eval(lo, hi int) (replica.Result, error)
	weights() ([]float32, error)
	close() error
}

// singleEngine is one replica in the calling goroutine.
type singleEngine struct {
	r        *replica.Replica
	test     data.Dataset
	accum    int
	clipNorm float64
	evalIdx  []int
	evalB    data.Batch
}

func (e *singleEngine) step(_ int, _ data.Cursor, b *data.Batch, lr float64, _ bool) (stepStats, error) {
	start := time.Now()
	e.r.ZeroGrads()
	e.r.Pool.ResetPeak()
	total := replica.Targets(b, 0, b.Rows, e.r.Model)
	scale := float32(0)
	if total > 0 {
		scale = float32(1 / float64(total))
	}
	var st stepStats
	per := b.Rows / e.accum
	for k := 0; k < e.accum; k++ {
		res, err := e.r.ForwardBackward(b, k*per, (k+1)*per, scale, nil)
		if err != nil {
			return st, err
		}
		st.LossSum += res.LossSum
		st.Targets += res.Targets
		st.Correct += res.Correct
	}
	norm, err := e.r.Update(lr, e.clipNorm)
	if err != nil {
		return st, err
	}
	st.GradNorm = norm
	st.ComputeMs = ms(time.Since(start))
	st.World = 1
	st.PeakAct = e.r.Pool.PeakBytes()
	return st, nil
}

func (e *singleEngine) eval(lo, hi int) (replica.Result, error) {
	e.evalIdx = e.evalIdx[:0]
	for i := lo; i < hi; i++ {
		e.evalIdx = append(e.evalIdx, i)
	}
	e.test.Fill(e.evalIdx, &e.evalB)
	return e.r.Evaluate(&e.evalB, 0, e.evalB.Rows)
}

func (e *singleEngine) weights() ([]float32, error) { return e.r.Model.Set.HostWeights(), nil }

func (e *singleEngine) close() error {
	if c, ok := e.r.Be.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
