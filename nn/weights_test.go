package nn_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/safetensors"
)

// TestLoadTiedCopy: PyTorch's state_dict of a tied model lists the token
// embedding twice, as tok.weight and head.weight; a model that ties them
// loads that file, but refuses a head.weight of other values (an untied
// head it would otherwise drop without a word).
func TestLoadTiedCopy(t *testing.T) {
	tok := []float32{1, 2, 3, 4, 5, 6}
	other := []float32{1, 2, 3, 4, 5, 7}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		head []float32
		ok   bool
	}{{"tied", tok, true}, {"untied", other, false}} {
		path := filepath.Join(dir, c.name+".safetensors")
		if err := safetensors.WriteFile(path, []safetensors.Tensor{
			safetensors.NewF32("tok.weight", []int{3, 2}, tok), safetensors.NewF32("head.weight", []int{3, 2}, c.head),
		}, nil); err != nil {
			t.Fatal(err)
		}
		s := nn.NewParamSet(cpu.New(1), 1)
		s.Add("tok.weight", []int{3, 2}, nn.Normal(0, 1))
		s.Finalize()
		err := s.LoadWeights(path)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && !errors.Is(err, nn.ErrStateDict):
			t.Errorf("%s: %v, want a state-dict error", c.name, err)
		case c.ok && s.StateDict()["tok.weight"][5] != 6:
			t.Errorf("%s: loaded %v", c.name, s.StateDict()["tok.weight"])
		}
	}
}
