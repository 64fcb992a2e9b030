package sim

import (
	"math"
	"math/rand/v2"
)

// The job's model: a multi-layer perceptron of one tanh hidden layer that
// regresses a smooth function of its inputs, with the mean squared error
// (½·e² per sample). Its gradient is written out by hand (checked against
// finite differences in the tests), so that a simulated step costs
// microseconds and is the same bits on every machine.
const (
	inputs = 4
	hidden = 8
	// nParams: W1 (hidden×inputs), b1 (hidden), W2 (hidden), b2 (1).
	nParams = hidden*inputs + hidden + hidden + 1
)

// dataset is the job's training data: x rows of inputs features and
// targets y, made from a fixed seed (the same for every simulated seed, so
// that the fault-free run is one per configuration).
type dataset struct {
	x [][inputs]float32
	y []float32
}

func newDataset(n int) *dataset {
	r := rand.New(rand.NewPCG(7, 11))
	d := &dataset{x: make([][inputs]float32, n), y: make([]float32, n)}
	for i := range n {
		var s float64
		for j := range inputs {
			v := r.Float64()*2 - 1
			d.x[i][j] = float32(v)
			s += v * float64(j+1) / inputs
		}
		d.y[i] = float32(math.Sin(2 * s))
	}
	return d
}

// initParams is the model built from the seed, the same on every replica.
func initParams() []float32 {
	r := rand.New(rand.NewPCG(3, 5))
	p := make([]float32, nParams)
	for i := range p {
		p[i] = float32(r.Float64() - 0.5)
	}
	return p
}

// gradient adds to g the gradient of the loss over the samples idx, each
// weighted by scale (1 / the global batch), and returns their weighted
// loss. g holds nParams values.
func (d *dataset) gradient(p []float32, idx []int, scale float32, g []float32) float32 {
	w1, b1 := p[:hidden*inputs], p[hidden*inputs:hidden*inputs+hidden]
	w2, b2 := p[hidden*inputs+hidden:hidden*inputs+2*hidden], p[nParams-1]
	gw1, gb1 := g[:hidden*inputs], g[hidden*inputs:hidden*inputs+hidden]
	gw2 := g[hidden*inputs+hidden : hidden*inputs+2*hidden]
	var loss float32
	var h [hidden]float32
	for _, i := range idx {
		x := &d.x[i]
		out := b2
		for k := range hidden {
			z := b1[k]
			for j := range inputs {
				z += w1[k*inputs+j] * x[j]
			}
			h[k] = float32(math.Tanh(float64(z)))
			out += w2[k] * h[k]
		}
		e := out - d.y[i]
		loss += scale * 0.5 * e * e
		de := scale * e
		g[nParams-1] += de
		for k := range hidden {
			gw2[k] += de * h[k]
			dz := de * w2[k] * (1 - h[k]*h[k])
			gb1[k] += dz
			for j := range inputs {
				gw1[k*inputs+j] += dz * x[j]
			}
		}
	}
	return loss
}

// Optimizer: SGD with momentum (PyTorch's form: v ← μv + g, p ← p − lr·v).
const (
	learningRate = 0.05
	momentum     = 0.9
)

// sgd applies one update with gradient g to p and its momentum v.
func sgd(p, v, g []float32) {
	for i := range p {
		v[i] = momentum*v[i] + g[i]
		p[i] -= learningRate * v[i]
	}
}

// Model parts. With Config.PP pipeline stages and Config.TP
// tensor-parallel shards a rank holds one part (stage·TP + shard, as
// mesh.Mesh.Part numbers them): the pipeline's stage 0 is the hidden layer
// (W1, b1), stage 1 the output layer (W2, b2); without a pipeline one
// stage holds both. A stage's tensor-parallel shard t holds hidden units
// [t·hidden/TP, (t+1)·hidden/TP): their rows of W1 and entries of b1
// (Megatron's column-parallel layer) and their columns of W2 (its
// row-parallel layer); the output bias b2 is shard 0's.

// partIndex lists the positions in the whole model's parameter vector
// (W1, b1, W2, b2 as gradient lays them out) that part holds, in
// increasing order, for a model cut into pp stages of tp shards.
func partIndex(pp, tp, part int) []int {
	stage, shard := part/tp, part%tp
	lo, hi := shard*hidden/tp, (shard+1)*hidden/tp
	var idx []int
	if stage == 0 {
		for k := lo; k < hi; k++ {
			for j := range inputs {
				idx = append(idx, k*inputs+j)
			}
		}
		for k := lo; k < hi; k++ {
			idx = append(idx, hidden*inputs+k)
		}
	}
	if stage == pp-1 {
		for k := lo; k < hi; k++ {
			idx = append(idx, hidden*inputs+hidden+k)
		}
		if shard == 0 {
			idx = append(idx, nParams-1)
		}
	}
	return idx
}

// gather copies the values of v at idx.
func gather(v []float32, idx []int) []float32 {
	out := make([]float32, len(idx))
	for i, j := range idx {
		out[i] = v[j]
	}
	return out
}
