package models

import (
	"fmt"
	"math"
	"strings"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// MLP shapes an MLP classifier: Sizes d0, d1, …, dn make layers fc1…fcn
// with fc{i}.weight [d_i, d_{i−1}], PyTorch's default Linear init, and ReLU
// between them. Tensor parallelism pairs the linears as Megatron-LM pairs
// a block's: fc1 column-parallel and fc2 row-parallel, fc3 and fc4 alike,
// …; with an odd count the last (the classifier) stays whole on every
// shard.
type MLP struct {
	Sizes []int
}

func init() {
	nn.Register(nn.ModelDef{
		Name:    "mlp",
		Summary: "multi-layer perceptron classifier (ReLU between Linear layers)",
		Data:    "mnist",
		Options: []nn.Option{
			{Name: "layers", Kind: nn.IntsOption, Usage: "MLP layer sizes d0,d1,…,dn (fc{i}.weight is [d_i, d_{i-1}]; default: the data's features,256,the data's classes)"},
		},
		// SGD with momentum 0.9, batch 64, two epochs with the learning
		// rate decaying from 0.05 to 0 on a cosine (98% on MNIST).
		Recipe: &nn.Recipe{Batch: 64, Optim: "sgd", Momentum: 0.9, LR: 0.05, Schedule: "cosine",
			Warmup: nn.NoWarmup, MinLRFactor: nn.NoMinLR, ClipNorm: nn.NoClip, Epochs: 2},
		New: newMLP,
	})
}

func newMLP(v nn.Values, d nn.DataShape) (nn.Spec, error) {
	if d.Tokens {
		return nil, fmt.Errorf("%w: mlp needs feature/label data, got %v", nn.ErrConfig, d)
	}
	sizes := v.Ints("layers")
	if len(sizes) == 0 {
		sizes = []int{d.Features, 256, d.Classes}
	}
	m := MLP{Sizes: sizes}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if sizes[0] != d.Features {
		return nil, fmt.Errorf("%w: --layers start with %d inputs but the data has %d features", nn.ErrConfig, sizes[0], d.Features)
	}
	if last := sizes[len(sizes)-1]; last != d.Classes {
		return nil, fmt.Errorf("%w: --layers end with %d outputs but the data has %d classes", nn.ErrConfig, last, d.Classes)
	}
	return m, nil
}

// NewMLP builds a whole MLP classifier on be.
func NewMLP(be kernels.Backend, cfg MLP, seed uint64) (*nn.Model, error) {
	return nn.BuildWhole(be, cfg, seed)
}

// Name implements nn.Spec.
func (MLP) Name() string { return "mlp" }

// Units implements nn.Spec: one per Linear (with its ReLU).
func (c MLP) Units() int { return len(c.Sizes) - 1 }

// Validate implements nn.Spec.
func (c MLP) Validate() error {
	if len(c.Sizes) < 2 {
		return fmt.Errorf("%w: an MLP needs at least two sizes (input, output), got %v", nn.ErrConfig, c.Sizes)
	}
	for _, d := range c.Sizes {
		if d <= 0 {
			return fmt.Errorf("%w: MLP layer sizes must be positive, got %v", nn.ErrConfig, c.Sizes)
		}
	}
	return nil
}

// CheckTP implements nn.Spec: every column-parallel layer's outputs divide
// among the shards; no sequence parallelism (no sequence).
func (c MLP) CheckTP(t nn.TP) error {
	if t.SP {
		return fmt.Errorf("%w: sequence parallelism needs a sequence model, not the MLP", nn.ErrConfig)
	}
	n := len(c.Sizes) - 1
	for u := range n {
		if mlpCut(u, n) == cutColumn && c.Sizes[u+1]%t.Size != 0 {
			return fmt.Errorf("%w: layer fc%d's %d outputs cannot be split among %d tensor-parallel shards", nn.ErrConfig, u+1, c.Sizes[u+1], t.Size)
		}
	}
	return nil
}

// cut is how tensor parallelism cuts one of the MLP's linears.
type cut uint8

const (
	cutWhole cut = iota
	cutColumn
	cutRow
)

// mlpCut pairs the MLP's n linears: even ones column-parallel, odd ones
// row-parallel, an unpaired last one whole.
func mlpCut(u, n int) cut {
	switch {
	case u%2 == 1:
		return cutRow
	case u+1 < n:
		return cutColumn
	}
	return cutWhole
}

// Build implements nn.Spec.
func (c MLP) Build(m *nn.Model) error {
	n := len(c.Sizes) - 1
	t := m.TP
	width := func(u int) int { // the activation width after unit u−1
		if u > 0 && mlpCut(u-1, n) == cutColumn && t.On() {
			return c.Sizes[u] / t.Size
		}
		return c.Sizes[u]
	}
	m.Features, m.Classes, m.Accuracy = c.Sizes[0], c.Sizes[n], true
	m.Input, m.InCols, m.OutCols = nn.DenseInput, width(m.Lo), width(m.Hi)
	for u := m.Lo; u < m.Hi; u++ {
		in, out := c.Sizes[u], c.Sizes[u+1]
		bound := float32(1 / math.Sqrt(float64(in)))
		name := fmt.Sprintf("fc%d", u+1)
		var l *nn.Linear
		var layer nn.Layer
		switch mlpCut(u, n) {
		case cutColumn:
			l = nn.ColumnLinear(m.Set, name, in, out, 1, t, nn.Uniform(-bound, bound), nn.Uniform(-bound, bound))
			layer = nn.ColumnLayer(l, t)
		case cutRow:
			l = nn.RowLinear(m.Set, name, in, out, t, nn.Uniform(-bound, bound), nn.Uniform(-bound, bound))
			layer = nn.RowLayer(l, t)
		default:
			l = nn.NewLinear(m.Set, name, in, out, true)
			layer = l
		}
		l.SkipInputGrad = u == 0
		// dx goes to the ReLU before it, unless a column-parallel layer
		// sums it over the group first (in fp32).
		l.LowInputGrad = u > 0 && mlpCut(u, n) != cutColumn
		// y goes to a ReLU, unless a row-parallel layer sums it over
		// the group first (in fp32).
		l.LowOutput = u < n-1 && mlpCut(u, n) != cutRow
		if u < n-1 {
			m.Layers = append(m.Layers, nn.Seq{layer, &nn.ActLayer{Fn: nn.ReLU}})
		} else {
			m.Layers = append(m.Layers, layer)
		}
	}
	parts := make([]string, len(c.Sizes))
	for i, d := range c.Sizes {
		parts[i] = fmt.Sprint(d)
	}
	m.Describe = "MLP " + strings.Join(parts, "-")
	return nil
}
