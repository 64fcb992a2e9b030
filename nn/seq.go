package nn

// Seq runs layers in order as one Layer: a pipeline unit made of several
// layers (an MLP's Linear and its ReLU).
type Seq []Layer

// Params implements Layer.
func (s Seq) Params() []*Param {
	var ps []*Param
	for _, l := range s {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// Forward implements Layer.
func (s Seq) Forward(c *Ctx, x Act) Act { return Forward(c, s, x) }

// Backward implements Layer.
func (s Seq) Backward(c *Ctx, dy Act) Act { return backward(c, s, dy, Hooks{}) }
