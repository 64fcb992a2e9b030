package nn

import "github.com/troupe-ml/troupe/kernels"

// Tape holds what one micro-batch's forward pass saved for its backward
// pass. Layers push in forward order and pop in reverse; each layer's
// Backward pops exactly what its Forward pushed. Buffers on a tape come from
// the Pool; the layer that pops one puts it back (Pool.Put) when done, and
// Clear puts back whatever is left on the tape.
type Tape struct {
	bufs []kernels.Buffer
	ids  []kernels.Index
	ints []int
}

// pushInt saves a size for the backward pass (a Parallel's branch widths).
func (t *Tape) pushInt(n int) { t.ints = append(t.ints, n) }

// popInt returns the last saved size.
func (t *Tape) popInt() int {
	n := t.ints[len(t.ints)-1]
	t.ints = t.ints[:len(t.ints)-1]
	return n
}

// Push saves buffers for the backward pass.
func (t *Tape) Push(bs ...kernels.Buffer) { t.bufs = append(t.bufs, bs...) }

// Pop returns the last saved buffer.
func (t *Tape) Pop() kernels.Buffer {
	b := t.bufs[len(t.bufs)-1]
	t.bufs[len(t.bufs)-1] = nil
	t.bufs = t.bufs[:len(t.bufs)-1]
	return b
}

// PushIndex saves an index buffer (owned by the caller, not the pool).
func (t *Tape) PushIndex(x kernels.Index) { t.ids = append(t.ids, x) }

// PopIndex returns the last saved index buffer.
func (t *Tape) PopIndex() kernels.Index {
	x := t.ids[len(t.ids)-1]
	t.ids[len(t.ids)-1] = nil
	t.ids = t.ids[:len(t.ids)-1]
	return x
}

// Len is the number of saved buffers (and sizes).
func (t *Tape) Len() int { return len(t.bufs) + len(t.ints) }

// Clear returns every saved buffer to the pool (used when a forward pass is
// thrown away: evaluation, or the forward half of activation recompute).
func (t *Tape) Clear(p *Pool) {
	for i := len(t.bufs) - 1; i >= 0; i-- {
		p.Put(t.bufs[i])
		t.bufs[i] = nil
	}
	t.bufs = t.bufs[:0]
	for i := range t.ids {
		t.ids[i] = nil
	}
	t.ids = t.ids[:0]
	t.ints = t.ints[:0]
}
