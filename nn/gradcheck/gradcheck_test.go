package gradcheck_test

import (
	"errors"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/gradcheck"
)

// shift is y = x + b (b a row vector), right in every way but one: its
// backward pass overwrites b's gradient instead of adding to it when
// overwrite is set.
type shift struct {
	b         *nn.Param
	overwrite bool
}

func (s *shift) Params() []*nn.Param { return []*nn.Param{s.b} }

func (s *shift) Forward(c *nn.Ctx, x nn.Act) nn.Act {
	c.Be.AddBias(x.X, s.b.W)
	return x
}

func (s *shift) Backward(c *nn.Ctx, dy nn.Act) nn.Act {
	if s.overwrite {
		c.Be.Fill(s.b.G, 0)
	}
	c.Be.SumRows(s.b.G, dy.X)
	return dy
}

func TestContractViolations(t *testing.T) {
	be := cpu.New(1)
	set := nn.NewParamSet(be, 1)
	good := &shift{b: set.Add("b", []int{4}, nn.Normal(0, 1))}
	set.Finalize()
	if err := gradcheck.Layer(be, good, 3, 4, gradcheck.Options{}); err != nil {
		t.Fatalf("a correct layer: %v", err)
	}
	bad := &shift{b: good.b, overwrite: true}
	if err := gradcheck.Layer(be, bad, 3, 4, gradcheck.Options{}); !errors.Is(err, gradcheck.ErrContract) {
		t.Fatalf("a layer that overwrites its gradient: %v, want ErrContract", err)
	}
}
