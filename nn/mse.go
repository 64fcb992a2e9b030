package nn

import "fmt"

// MSELoss is the squared-error Objective of real-valued targets
// (Targets.Values, as wide as the output): the sum of (out − target)²
// over every element, which the trainer divides by the number of
// elements — PyTorch's MSELoss with its default mean reduction. It takes
// ownership of out.X.
type MSELoss struct{}

// Loss implements Objective.
func (MSELoss) Loss(c *Ctx, out Act, t Targets, gradScale float32) (float64, Act) {
	if t.Values == nil || t.Values.Len() != out.Rows*out.Cols {
		panic(fmt.Sprintf("nn: MSELoss needs real-valued targets as wide as the output [%d, %d]", out.Rows, out.Cols))
	}
	c.Be.Axpy(-1, t.Values, out.X) // out − target
	sum := c.Be.SumSquares(out.X)
	if !c.Train {
		c.Pool.Put(out.X)
		return sum, Act{}
	}
	c.Be.Scale(out.X, 2*gradScale)
	return sum, out
}
