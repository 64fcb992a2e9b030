package train

import (
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
)

// profileRounds is how many forward and backward passes time each unit.
const profileRounds = 3

// unitTimes measures each pipeline unit of m (forward plus backward of one
// micro-batch, the loss counted with the last unit) over a few rounds on
// ds's first rows: the costs --partition time balances.
func unitTimes(m *nn.Model, ds data.Dataset, rows int) ([][]time.Duration, error) {
	if rows < 1 {
		return nil, fieldErr("Batch", "leaves micro-batches of %d rows, which cannot be profiled", rows)
	}
	be := m.Set.Backend()
	idx := make([]int, rows)
	for i := range idx {
		idx[i] = i % ds.Len()
	}
	var b data.Batch
	ds.Fill(idx, &b)
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	var tgt nn.Targets
	if len(b.V) > 0 {
		tgt.Values, tgt.Cols = be.Alloc(len(b.V)), len(b.V)/b.Rows
		be.Upload(tgt.Values, b.V)
		defer be.Free(tgt.Values)
	} else {
		tgt.Ids = be.AllocIndex(len(b.Y))
		be.UploadIndex(tgt.Ids, b.Y)
		defer be.FreeIndex(tgt.Ids)
	}
	ids := be.AllocIndex(len(b.Tokens))
	defer be.FreeIndex(ids)
	scale := float32(1 / float64(max(1, b.Terms(0, b.Rows))))
	samples := make([][]time.Duration, len(m.Layers))
	for round := 0; round < profileRounds; round++ {
		var x nn.Act
		if m.Input == nn.TokenInput {
			be.UploadIndex(ids, b.Tokens)
			x = nn.Act{Ids: ids, Rows: len(b.Tokens)}
		} else {
			xb := pool.Get(len(b.X))
			be.Upload(xb, b.X)
			x = nn.Act{X: xb, Rows: rows, Cols: m.Features}
		}
		m.Set.ZeroGrads()
		fwd := make([]time.Duration, len(m.Layers))
		for i, l := range m.Layers {
			t0 := time.Now()
			x = l.Forward(c, x)
			if i == len(m.Layers)-1 {
				var d nn.Act
				_, d = m.Loss(c, x, tgt, scale)
				x = d
			}
			if err := be.Sync(); err != nil {
				return nil, err
			}
			fwd[i] = time.Since(t0)
		}
		for i := len(m.Layers) - 1; i >= 0; i-- {
			t0 := time.Now()
			x = m.Layers[i].Backward(c, x)
			if err := be.Sync(); err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], fwd[i]+time.Since(t0))
		}
		if x.X != nil {
			pool.Put(x.X)
		}
	}
	return samples, nil
}

// timeCuts cuts m into p stages of balanced measured time.
func timeCuts(cfg *Config, m *nn.Model, ds data.Dataset) ([]pipeline.Range, error) {
	samples, err := unitTimes(m, ds, cfg.Batch/cfg.DP/cfg.MicroBatches)
	if err != nil {
		return nil, err
	}
	costs, err := pipeline.TimeCosts(samples)
	if err != nil {
		return nil, err
	}
	return pipeline.Partition(costs, cfg.PP)
}
