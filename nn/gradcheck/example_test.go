package gradcheck_test

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/gradcheck"
)

// Check a layer — here nn's Linear followed by a GELU, as a user would
// check a layer of their own: build it on a ParamSet, Finalize, and hand
// it to Layer with the input shape. A nil error means every checked
// gradient (the input's and each parameter's) agrees with the finite
// differences.
func ExampleLayer() {
	be := cpu.New(1)
	s := nn.NewParamSet(be, 7)
	l := nn.Seq{nn.NewLinear(s, "fc", 16, 8, true), &nn.ActLayer{Fn: nn.GELU}}
	s.Finalize()
	err := gradcheck.Layer(be, l, 5, 16, gradcheck.Options{})
	fmt.Println("gradients agree:", err == nil)
	// Output: gradients agree: true
}

// brokenScale claims y = 2x but forgets the factor in its backward pass.
type brokenScale struct{}

func (brokenScale) Params() []*nn.Param { return nil }

func (brokenScale) Forward(c *nn.Ctx, x nn.Act) nn.Act {
	c.Be.Scale(x.X, 2)
	return x
}

func (brokenScale) Backward(c *nn.Ctx, dy nn.Act) nn.Act { return dy }

// A wrong backward pass is reported with its worst element.
func ExampleLayer_mismatch() {
	be := cpu.New(1)
	err := gradcheck.Layer(be, brokenScale{}, 2, 3, gradcheck.Options{})
	m, ok := err.(*gradcheck.Mismatch)
	fmt.Println(ok, m.Tensor, m.Failed, "of", m.Checked)
	// Output: true input 6 of 6
}
