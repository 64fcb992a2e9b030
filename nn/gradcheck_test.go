package nn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/gradcheck"
)

// perturbWeights overwrites the named parameters with N(mean, sd²) values,
// so that a check sees norms that are not the identity.
func perturbWeights(be kernels.Backend, s *nn.ParamSet, seed uint64, mean, sd float64, names ...string) {
	r := rand.New(rand.NewPCG(seed, 3))
	for _, name := range names {
		p := s.Get(name)
		w := make([]float32, p.Size())
		for i := range w {
			w[i] = float32(mean + sd*r.NormFloat64())
		}
		be.Upload(p.W, w)
	}
}

// The gradient checker on existing layers: every one passes at the
// default tolerances (gradcheck's godoc says why they are what they are).
// The weights are drawn at std 0.3, so that attention's scores move: at
// 0.02 the softmax is nearly uniform and its backward pass barely checked.
func TestGradCheckExistingLayers(t *testing.T) {
	be := cpu.New(1)
	for _, k := range []struct {
		name       string
		rows, cols int
		make       func(s *nn.ParamSet) (nn.Layer, []string)
	}{
		{"Linear", 6, 10, func(s *nn.ParamSet) (nn.Layer, []string) { return nn.NewLinear(s, "fc", 10, 7, true), nil }},
		{"LayerNorm", 5, 12, func(s *nn.ParamSet) (nn.Layer, []string) {
			return nn.NewLayerNorm(s, "ln", 12), []string{"ln.weight", "ln.bias"}
		}},
		{"CausalSelfAttention", 8, 12, func(s *nn.ParamSet) (nn.Layer, []string) {
			a, err := nn.NewCausalSelfAttention(s, "attn", 12, 3, 4, 0.3, 0.3, nn.NoTP)
			if err != nil {
				t.Fatal(err)
			}
			return a, nil
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			s := nn.NewParamSet(be, 5)
			l, perturbed := k.make(s)
			s.Finalize()
			perturbWeights(be, s, 9, 0.5, 0.5, perturbed...)
			if err := gradcheck.Layer(be, l, k.rows, k.cols, gradcheck.Options{MaxPerTensor: -1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// tinyLlama is the block shape of the tests: grouped-query attention with
// 4 heads on 2 kv heads of 4 dims, a rope theta that is not the default,
// an FFN that is not a multiple of the width.
func tinyLlama(kv int) nn.LlamaBlockConfig {
	return nn.LlamaBlockConfig{DModel: 16, Heads: 4, KVHeads: kv, FFN: 24, Context: 5, RopeTheta: 500, NormEps: 1e-5, Std: 0.3}
}

// Every Llama layer against the gradient checker, checking every element.
func TestGradCheckLlamaLayers(t *testing.T) {
	be := cpu.New(1)
	cfg := tinyLlama(2)
	for _, k := range []struct {
		name string
		rows int
		make func(s *nn.ParamSet) (nn.Layer, []string, error)
	}{
		{"RMSNorm", 7, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			return nn.NewRMSNorm(s, "norm", 16, 1e-5), []string{"norm.weight"}, nil
		}},
		{"RoPE", 10, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			r, err := nn.NewRoPE(4, 5, 500)
			return r, nil, err
		}},
		{"RoPE/pos0=9", 10, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			r, err := nn.NewRoPE(8, 5, 0)
			if r != nil {
				r.Pos0 = 9
			}
			return r, nil, err
		}},
		{"SwiGLUMLP", 6, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			m, err := nn.NewSwiGLUMLP(s, "mlp", 16, 24, nn.Normal(0, 0.3), nn.NoTP)
			return m, nil, err
		}},
		{"LlamaAttention/gqa", 10, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			a, err := nn.NewLlamaAttention(s, "attn", nn.LlamaAttentionConfig{D: 16, T: 5, Heads: 4, KVHeads: 2, RopeTheta: 500}, nn.Normal(0, 0.3), nn.NoTP)
			return a, nil, err
		}},
		{"LlamaAttention/mqa", 10, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			a, err := nn.NewLlamaAttention(s, "attn", nn.LlamaAttentionConfig{D: 16, T: 5, Heads: 4, KVHeads: 1}, nn.Normal(0, 0.3), nn.NoTP)
			return a, nil, err
		}},
		{"LlamaBlock", 10, func(s *nn.ParamSet) (nn.Layer, []string, error) {
			b, err := nn.NewLlamaBlock(s, "layers.0", cfg, nn.NoTP)
			return b, []string{"layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight"}, err
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			s := nn.NewParamSet(be, 11)
			l, perturbed, err := k.make(s)
			if err != nil {
				t.Fatal(err)
			}
			s.Finalize()
			perturbWeights(be, s, 13, 1, 0.3, perturbed...)
			cols := 16
			if r, ok := l.(*nn.RoPE); ok {
				cols = 3 * r.HeadDim
			}
			if err := gradcheck.Layer(be, l, k.rows, cols, gradcheck.Options{MaxPerTensor: -1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
