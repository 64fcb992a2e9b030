package gated_test

import (
	"testing"

	"github.com/troupe-ml/troupe/examples/custom-model/gated"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/gradcheck"
)

// The gate's hand-written backward pass agrees with finite differences
// (gradcheck's stated tolerances), alone and inside a block of the model,
// with gates away from their initial value.
func TestGateGradients(t *testing.T) {
	be := cpu.New(1)
	for name, tc := range map[string]struct {
		build func(s *nn.ParamSet) nn.Layer
		cols  int // the input's width
	}{
		"gate": {func(s *nn.ParamSet) nn.Layer { return gated.NewGate(s, "g", 7) }, 7},
		"block": {func(s *nn.ParamSet) nn.Layer {
			return nn.Seq{nn.NewLinear(s, "fc", 5, 7, true), gated.NewGate(s, "g", 7)}
		}, 5},
	} {
		t.Run(name, func(t *testing.T) {
			s := nn.NewParamSet(be, 4)
			l := tc.build(s)
			s.Finalize()
			g := s.Get("g.gate")
			w := make([]float32, g.Size())
			for i := range w {
				w[i] = float32(i)*0.7 - 2
			}
			be.Upload(g.W, w)
			if err := gradcheck.Layer(be, l, 6, tc.cols, gradcheck.Options{MaxPerTensor: -1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
