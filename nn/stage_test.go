package nn_test

import (
	"fmt"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// A pipeline stage built from units [lo, hi) holds exactly the parameters
// the whole model has for those units, with the same weights, and the tied
// token embedding is marked on the stages that hold only one of its uses.
func TestStagesHoldTheWholeModelsWeights(t *testing.T) {
	be := cpu.New(1)
	specs := map[string]nn.Spec{
		"mlp": models.MLP{Sizes: []int{6, 5, 4, 3}},
		"gpt": models.GPT{Vocab: 7, Context: 4, DModel: 8, Layers: 3, Heads: 2},
	}
	for name, spec := range specs {
		whole, err := nn.Build(be, spec, 42, 0, spec.Units())
		if err != nil {
			t.Fatal(err)
		}
		want := whole.Set.StateDict()
		for _, cut := range [][2]int{{0, 1}, {1, spec.Units()}, {0, spec.Units() - 1}, {1, 2}} {
			t.Run(fmt.Sprintf("%s/%d-%d", name, cut[0], cut[1]), func(t *testing.T) {
				st, err := nn.Build(be, spec, 42, cut[0], cut[1])
				if err != nil {
					t.Fatal(err)
				}
				for pname, w := range st.Set.StateDict() {
					ref, ok := want[pname]
					if !ok {
						t.Fatalf("stage has %q, the whole model does not", pname)
					}
					for i := range w {
						if w[i] != ref[i] {
							t.Fatalf("%s[%d] = %v on the stage, %v in the whole model", pname, i, w[i], ref[i])
						}
					}
				}
				if name == "gpt" {
					holdsTok := cut[0] == 0 || cut[1] == spec.Units()
					split := holdsTok && !(cut[0] == 0 && cut[1] == spec.Units())
					if (st.Tied != nil) != split {
						t.Errorf("Tied = %v, want set: %v", st.Tied, split)
					}
				}
			})
		}
	}
}
