package nn

import "github.com/troupe-ml/troupe/kernels"

// CrossEntropy computes softmax cross-entropy of logits [rows, classes]
// against targets (negative targets ignored). It returns the sum of the
// per-row losses and, when training, the gradient of gradScale·sum (the
// caller picks gradScale = 1/rows of the whole global batch, so that
// gradients summed over ranks and micro-batches are the gradient of the
// mean). It takes ownership of logits.X.
func CrossEntropy(c *Ctx, logits Act, targets kernels.Index, gradScale float32) (sum float64, dlogits Act) {
	losses := c.Pool.Get(logits.Rows)
	var d kernels.Buffer
	if c.Train {
		d = c.Pool.Get(logits.Rows * logits.Cols)
	}
	c.Be.SoftmaxCrossEntropy(losses, d, logits.X, targets, gradScale)
	sum = c.Be.Sum(losses)
	c.Pool.Put(losses)
	c.Pool.Put(logits.X)
	if !c.Train {
		return sum, Act{}
	}
	return sum, Act{X: d, Rows: logits.Rows, Cols: logits.Cols}
}

// Forward runs layers in order.
func Forward(c *Ctx, layers []Layer, x Act) Act {
	for _, l := range layers {
		x = l.Forward(c, x)
	}
	return x
}

// Backward runs layers' backward passes in reverse order.
func Backward(c *Ctx, layers []Layer, dy Act) Act {
	return BackwardWith(c, layers, dy, nil)
}

// BackwardWith is Backward calling before(i), when given, before layer
// i's backward pass: where a caller gives the layer's parameters the
// gradient buffers it accumulates into (ZeRO-2 binds them per bucket).
func BackwardWith(c *Ctx, layers []Layer, dy Act, before func(i int)) Act {
	for i := len(layers) - 1; i >= 0; i-- {
		if before != nil {
			before(i)
		}
		dy = layers[i].Backward(c, dy)
	}
	return dy
}
