package checkpoint

import (
	"fmt"
	"slices"
)

// A box is a block of a tensor: [Offsets[d], Offsets[d]+Sizes[d]) along
// every dimension d, as torch.distributed.checkpoint describes a chunk.
// Slices of a data-parallel checkpoint are blocks of whole rows; a
// tensor-parallel shard's are blocks of rows of a column range too (a
// row-parallel weight), or several row blocks (a fused qkv weight).

// boxVolume is the number of elements of a box with the given sizes.
func boxVolume(sizes []int) int64 {
	n := int64(1)
	for _, s := range sizes {
		n *= int64(s)
	}
	return n
}

// boxIntersect returns the intersection of boxes a and b (offsets and
// sizes) and whether it is not empty.
func boxIntersect(aOff, aSize, bOff, bSize []int) (off, size []int, ok bool) {
	off, size = make([]int, len(aOff)), make([]int, len(aOff))
	for d := range aOff {
		lo, hi := max(aOff[d], bOff[d]), min(aOff[d]+aSize[d], bOff[d]+bSize[d])
		if lo >= hi {
			return nil, nil, false
		}
		off[d], size[d] = lo, hi-lo
	}
	return off, size, true
}

// wholeRows reports whether a slice of a tensor of shape is a block of
// whole rows (every dimension but the first complete): the slices
// PlanRead can address as element ranges.
func wholeRows(s SliceEntry, shape []int) bool {
	for d := 1; d < len(shape); d++ {
		if s.Offsets[d] != 0 || s.Sizes[d] != shape[d] {
			return false
		}
	}
	return true
}

// copyBox copies the elements of box (off, size), given in the coordinates
// of both arrays, from src, a row-major array of shape srcShape whose
// first element sits at srcOff, into dst, one of shape dstShape at dstOff;
// es is the element size in bytes. Runs along the last dimension are
// copied whole.
func copyBox(dst []byte, dstOff, dstShape []int, src []byte, srcOff, srcShape []int, off, size []int, es int) {
	n := len(size)
	if n == 0 {
		copy(dst[:es], src[:es])
		return
	}
	if boxVolume(size) == 0 {
		return
	}
	stride := func(shape []int) []int {
		st := make([]int, n)
		acc := es
		for d := n - 1; d >= 0; d-- {
			st[d] = acc
			acc *= shape[d]
		}
		return st
	}
	ds, ss := stride(dstShape), stride(srcShape)
	run := size[n-1] * es
	idx := make([]int, n-1) // position within the box, all dims but the last
	for {
		db, sb := 0, 0
		for d := range n {
			i := off[d]
			if d < n-1 {
				i += idx[d]
			}
			db += (i - dstOff[d]) * ds[d]
			sb += (i - srcOff[d]) * ss[d]
		}
		copy(dst[db:db+run], src[sb:sb+run])
		d := n - 2
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < size[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// ReadBox fills dst with the block (off, size) of tensor name, row-major
// in the block's own shape, from whichever slices hold it, verifying each
// slice's CRC-32C the first time any of it is read.
func (c *Checkpoint) ReadBox(name string, off, size []int, dst []byte) error {
	t, ok := c.Manifest.Lookup(name)
	if !ok {
		return fmt.Errorf("%w: checkpoint has no tensor %q", ErrMismatch, name)
	}
	if len(off) != len(t.Shape) || len(size) != len(t.Shape) {
		return fmt.Errorf("%w: a %d-d block of %q, which has %d dimensions", ErrMismatch, len(off), name, len(t.Shape))
	}
	for d := range off {
		if off[d] < 0 || size[d] < 0 || off[d]+size[d] > t.Shape[d] {
			return fmt.Errorf("%w: block %v + %v outside %q of shape %v", ErrMismatch, off, size, name, t.Shape)
		}
	}
	es := t.DType.Size()
	if want := boxVolume(size) * int64(es); int64(len(dst)) != want {
		return fmt.Errorf("%w: %d-byte buffer for a block of %d bytes of %q", ErrMismatch, len(dst), want, name)
	}
	var covered int64
	for i, s := range t.Slices {
		ioff, isize, ok := boxIntersect(off, size, s.Offsets, s.Sizes)
		if len(off) == 0 {
			ioff, isize, ok = []int{}, []int{}, true
		}
		if !ok {
			continue
		}
		buf := make([]byte, s.Bytes)
		if err := c.readSlice(t, i, 0, buf); err != nil {
			return err
		}
		copyBox(dst, off, size, buf, s.Offsets, s.Sizes, ioff, isize, es)
		covered += boxVolume(isize)
	}
	if covered != boxVolume(size) {
		return fmt.Errorf("%w: the slices of %q cover %d of the block's %d elements", ErrCorrupt, name, covered, boxVolume(size))
	}
	return nil
}

// readWhole fills dst with the whole tensor t.
func (c *Checkpoint) readWhole(t *TensorEntry, dst []byte) error {
	return c.ReadBox(t.Name, make([]int, len(t.Shape)), slices.Clone(t.Shape), dst)
}
