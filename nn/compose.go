package nn

import "fmt"

// Residual runs Body beside an identity path: y = x + Body(x). Body must
// keep the width of its input. Its backward pass needs no code of Body's
// beyond Body's own: dy flows to the input unchanged and through Body.
type Residual struct {
	Body Layer
}

// Params implements Layer.
func (r Residual) Params() []*Param { return r.Body.Params() }

// Forward implements Layer.
func (r Residual) Forward(c *Ctx, x Act) Act {
	h := c.Pool.Get(x.Rows * x.Cols)
	c.Be.Copy(h, x.X)
	y := r.Body.Forward(c, Act{X: h, Rows: x.Rows, Cols: x.Cols})
	if y.Rows != x.Rows || y.Cols != x.Cols {
		panic(fmt.Sprintf("nn: Residual: the body maps [%d, %d] to [%d, %d]", x.Rows, x.Cols, y.Rows, y.Cols))
	}
	c.Be.Add(x.X, x.X, y.X)
	c.Pool.Put(y.X)
	return x
}

// Backward implements Layer.
func (r Residual) Backward(c *Ctx, dy Act) Act {
	g := c.Pool.Get(dy.Rows * dy.Cols)
	c.Be.Copy(g, dy.X)
	dh := r.Body.Backward(c, Act{X: g, Rows: dy.Rows, Cols: dy.Cols})
	if dh.X != nil {
		c.Be.Add(dy.X, dy.X, dh.X)
		c.Pool.Put(dh.X)
	}
	return dy
}

// Parallel runs Branches side by side on the same input and sums their
// outputs (of equal width), or, with Concat, puts them side by side (the
// output's columns are branch 0's, then branch 1's, …). The input's
// gradient is the sum of the branches'.
type Parallel struct {
	Branches []Layer
	Concat   bool
}

// Params implements Layer.
func (p *Parallel) Params() []*Param {
	var ps []*Param
	for _, b := range p.Branches {
		ps = append(ps, b.Params()...)
	}
	return ps
}

// Forward implements Layer.
func (p *Parallel) Forward(c *Ctx, x Act) Act {
	if len(p.Branches) == 0 {
		panic("nn: Parallel without branches")
	}
	ys := make([]Act, len(p.Branches))
	for i, b := range p.Branches {
		in := x
		if i < len(p.Branches)-1 { // the last branch takes x itself
			in = Act{X: c.Pool.Get(x.Rows * x.Cols), Rows: x.Rows, Cols: x.Cols}
			c.Be.Copy(in.X, x.X)
		}
		ys[i] = b.Forward(c, in)
		if ys[i].Rows != x.Rows {
			panic(fmt.Sprintf("nn: Parallel: branch %d maps %d rows to %d", i, x.Rows, ys[i].Rows))
		}
	}
	if !p.Concat {
		y := ys[0]
		for i, o := range ys[1:] {
			if o.Cols != y.Cols {
				panic(fmt.Sprintf("nn: Parallel: branch %d is %d wide, branch 0 %d: a sum needs one width (or Concat)", i+1, o.Cols, y.Cols))
			}
			c.Be.Add(y.X, y.X, o.X)
			c.Pool.Put(o.X)
		}
		return y
	}
	width := 0
	for _, o := range ys {
		width += o.Cols
	}
	y := Act{X: c.Pool.Get(x.Rows * width), Rows: x.Rows, Cols: width}
	off := 0
	for _, o := range ys {
		c.Be.CopyCols(y.X, width, off, o.X, o.Cols, 0, o.Cols)
		off += o.Cols
		c.Pool.Put(o.X)
	}
	c.keepWidths(ys)
	return y
}

// Backward implements Layer. The branches run backward in the reverse of
// their forward order (the tape is a stack).
func (p *Parallel) Backward(c *Ctx, dy Act) Act {
	var widths []int
	if p.Concat {
		widths = c.popWidths(len(p.Branches))
	}
	var dx Act
	off := dy.Cols
	for i := len(p.Branches) - 1; i >= 0; i-- {
		var g Act
		switch {
		case p.Concat:
			off -= widths[i]
			g = Act{X: c.Pool.Get(dy.Rows * widths[i]), Rows: dy.Rows, Cols: widths[i]}
			c.Be.CopyCols(g.X, widths[i], 0, dy.X, dy.Cols, off, widths[i])
		case i == 0: // the first branch takes dy itself
			g = dy
		default:
			g = Act{X: c.Pool.Get(dy.Rows * dy.Cols), Rows: dy.Rows, Cols: dy.Cols}
			c.Be.Copy(g.X, dy.X)
		}
		d := p.Branches[i].Backward(c, g)
		switch {
		case d.X == nil:
			dx = Act{Rows: d.Rows}
		case dx.X == nil:
			dx = d
		default:
			c.Be.Add(dx.X, dx.X, d.X)
			c.Pool.Put(d.X)
		}
	}
	if p.Concat {
		c.Pool.Put(dy.X)
	}
	return dx
}

// keepWidths saves a concatenating Parallel's branch widths for its
// backward pass (on the tape, so that micro-batches in flight keep their
// own).
func (c *Ctx) keepWidths(ys []Act) {
	if !c.Train {
		return
	}
	for _, o := range ys {
		c.Tape.pushInt(o.Cols)
	}
}

// popWidths takes n widths keepWidths saved, in their forward order.
func (c *Ctx) popWidths(n int) []int {
	w := make([]int, n)
	for i := n - 1; i >= 0; i-- {
		w[i] = c.Tape.popInt()
	}
	return w
}
