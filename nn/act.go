package nn

import "github.com/troupe-ml/troupe/kernels"

// Act is an activation flowing between layers: a row-major [Rows, Cols]
// float buffer, or, at a GPT's input, Rows token ids.
type Act struct {
	X    kernels.Buffer
	Ids  kernels.Index
	Rows int
	Cols int
}

// Layer is a unit of a sequential model with an explicit backward pass.
//
// Ownership: Forward takes ownership of x.X (it saves it on the tape or
// returns it to the pool) and returns a fresh y; Backward takes ownership of
// dy and returns a fresh dx (nil X for a layer whose input is token ids).
// Parameter gradients accumulate into Param.G.
type Layer interface {
	Params() []*Param
	Forward(c *Ctx, x Act) Act
	Backward(c *Ctx, dy Act) Act
}
