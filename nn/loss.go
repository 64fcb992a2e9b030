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
	return ForwardWith(c, layers, x, Hooks{})
}

// Hooks run around each layer i of a pass, when given: where a caller
// makes the layer's parameters present before it runs and lets them go
// after (ZeRO-3 gathers each layer's weights and frees them; ZeRO-2 binds
// its gradient buffers).
type Hooks struct {
	Before, After func(i int)
}

func (h Hooks) before(i int) {
	if h.Before != nil {
		h.Before(i)
	}
}

func (h Hooks) after(i int) {
	if h.After != nil {
		h.After(i)
	}
}

// ForwardWith is Forward with hooks around each layer. Under mixed
// precision the layers may hand each other activations in the compute type
// (an activation function's output, which the next linear layer takes as
// its GEMM operand); what the pass returns is fp32 (widened, exactly),
// whatever its last layer was: a pipeline stage's output crosses to the
// next stage as fp32, logits go to the fp32 loss.
func ForwardWith(c *Ctx, layers []Layer, x Act, h Hooks) Act {
	for i, l := range layers {
		h.before(i)
		x = l.Forward(c, x)
		h.after(i)
	}
	if x.X != nil {
		x.X = c.widen(x.X)
	}
	return x
}

// Backward runs layers' backward passes in reverse order.
func Backward(c *Ctx, layers []Layer, dy Act) Act {
	return BackwardWith(c, layers, dy, Hooks{})
}

// BackwardWith is Backward with hooks around each layer. The gradient it
// returns is fp32 (what a pipeline stage sends on): one that the first
// layer left in the compute type is widened.
func BackwardWith(c *Ctx, layers []Layer, dy Act, h Hooks) Act {
	dy = backward(c, layers, dy, h)
	if dy.X != nil {
		dy.X = c.widen(dy.X)
	}
	return dy
}

// backward runs the layers' Backward in reverse order; the gradient
// between them may be in the compute type (see Linear.LowInputGrad).
func backward(c *Ctx, layers []Layer, dy Act, h Hooks) Act {
	for i := len(layers) - 1; i >= 0; i-- {
		h.before(i)
		dy = layers[i].Backward(c, dy)
		h.after(i)
	}
	return dy
}
