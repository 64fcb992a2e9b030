package train

import (
	"fmt"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/nn"
)

// Predict runs the whole model m (Summary.Trained, or one built with
// BuildModel) forward on rows dense input rows x (rows × m.Features) and
// returns its outputs (rows × m.OutCols): class scores, or the values a
// regression predicts.
func Predict(m *nn.Model, x []float32, rows int) ([]float32, error) {
	switch {
	case !m.First() || !m.Last() || m.TP.On():
		return nil, fmt.Errorf("train: predict needs the whole model, not %s", m.Describe)
	case m.Input != nn.DenseInput:
		return nil, fmt.Errorf("train: predict takes feature rows; %s reads tokens", m.Name)
	case rows <= 0 || len(x) != rows*m.Features:
		return nil, fmt.Errorf("train: predict: %d values are not %d rows of %d features", len(x), rows, m.Features)
	}
	be := m.Set.Backend()
	c := nn.NewCtx(be, nn.NewPool(be))
	c.Train = false
	in := c.Pool.Get(len(x))
	be.Upload(in, x)
	y := nn.Forward(c, m.Layers, nn.Act{X: in, Rows: rows, Cols: m.Features})
	out := make([]float32, y.Rows*y.Cols)
	be.Download(out, y.X)
	c.Pool.Put(y.X)
	return out, be.Sync()
}

// Evaluate runs the whole model m over ds in batches of batch samples and
// returns the mean loss per term (its objective's) and, for a classifier
// (m.Accuracy), the accuracy per sample.
func Evaluate(m *nn.Model, ds data.Dataset, batch int) (loss, acc float64, err error) {
	if !m.First() || !m.Last() || m.TP.On() {
		return 0, 0, fmt.Errorf("train: evaluate needs the whole model, not %s", m.Describe)
	}
	if batch <= 0 {
		return 0, 0, fmt.Errorf("train: evaluate: batch %d", batch)
	}
	be := m.Set.Backend()
	pool := nn.NewPool(be)
	var b data.Batch
	var sum float64
	var terms, correct int
	idx := make([]int, 0, batch)
	for lo := 0; lo < ds.Len(); lo += batch {
		idx = idx[:0]
		for i := lo; i < min(lo+batch, ds.Len()); i++ {
			idx = append(idx, i)
		}
		ds.Fill(idx, &b)
		s, n := evalBatch(m, pool, &b)
		sum, correct = sum+s, correct+n
		terms += b.Terms(0, b.Rows)
	}
	if err := be.Sync(); err != nil {
		return 0, 0, err
	}
	if terms > 0 {
		loss = sum / float64(terms)
	}
	if m.Accuracy && ds.Len() > 0 {
		acc = float64(correct) / float64(ds.Len())
	}
	return loss, acc, nil
}

// evalBatch is the loss sum of m on b and the rows it classifies right (a
// classifier's).
func evalBatch(m *nn.Model, pool *nn.Pool, b *data.Batch) (float64, int) {
	be := m.Set.Backend()
	c := nn.NewCtx(be, pool)
	c.Train = false
	var x nn.Act
	if m.Input == nn.TokenInput {
		ids := be.AllocIndex(len(b.Tokens))
		defer be.FreeIndex(ids)
		be.UploadIndex(ids, b.Tokens)
		x = nn.Act{Ids: ids, Rows: len(b.Tokens)}
	} else {
		x = nn.Act{X: pool.Get(len(b.X)), Rows: b.Rows, Cols: m.Features}
		be.Upload(x.X, b.X)
	}
	y := nn.Forward(c, m.Layers, x)
	var t nn.Targets
	correct := 0
	if len(b.V) > 0 {
		t.Values, t.Cols = be.Alloc(len(b.V)), len(b.V)/b.Rows
		defer be.Free(t.Values)
		be.Upload(t.Values, b.V)
	} else {
		t.Ids = be.AllocIndex(len(b.Y))
		defer be.FreeIndex(t.Ids)
		be.UploadIndex(t.Ids, b.Y)
		if m.Accuracy {
			correct = be.ArgmaxCorrect(y.X, t.Ids)
		}
	}
	s, _ := m.Loss(c, y, t, 0)
	return s, correct
}
