package nn

import "fmt"

// Split is a tensor-parallel shard's place in the whole parameter:
// dimension Dim of the whole shape Full is Blocks equal blocks (3 for a
// fused qkv weight: q, k and v), each cut into Parts equal pieces, and the
// shard holds piece Index of every block, in block order. When Parts does
// not divide a block (a vocabulary of 126 tokens over 4 shards) each piece
// is rounded up and the shard's rows past the block's end are padding:
// zeros that belong to no part of the whole.
type Split struct {
	Full   []int
	Dim    int
	Blocks int
	Parts  int
	Index  int
}

// Piece is the length of one block's piece along Dim, padding included.
func (s Split) Piece() int {
	return (s.Full[s.Dim]/s.Blocks + s.Parts - 1) / s.Parts
}

// Shape is the shard's shape.
func (s Split) Shape() []int {
	sh := append([]int(nil), s.Full...)
	sh[s.Dim] = s.Blocks * s.Piece()
	return sh
}

// Validate checks that the split describes a shard of Full.
func (s Split) Validate() error {
	switch {
	case s.Dim < 0 || s.Dim >= len(s.Full):
		return fmt.Errorf("%w: split dimension %d of a %d-d tensor", ErrConfig, s.Dim, len(s.Full))
	case s.Blocks < 1 || s.Full[s.Dim]%s.Blocks != 0:
		return fmt.Errorf("%w: %d blocks of dimension %d of %v", ErrConfig, s.Blocks, s.Dim, s.Full)
	case s.Parts < 1 || s.Index < 0 || s.Index >= s.Parts:
		return fmt.Errorf("%w: shard %d of %d", ErrConfig, s.Index, s.Parts)
	}
	return nil
}

// Box is one block's share of the shard in the whole tensor's coordinates:
// along Dim it covers [Lo, Lo+Len) of the whole, stored at [At, At+Len) of
// the shard; every other dimension is whole. Len is 0 for a piece that is
// all padding.
type Box struct {
	Lo, Len, At int
}

// Boxes lists the shard's blocks, in block order.
func (s Split) Boxes() []Box {
	block, piece := s.Full[s.Dim]/s.Blocks, s.Piece()
	out := make([]Box, s.Blocks)
	for b := range out {
		start := s.Index * piece
		n := max(0, min(piece, block-start))
		out[b] = Box{Lo: b*block + start, Len: n, At: b * piece}
	}
	return out
}

// strides returns the element counts outside and inside Dim.
func (s Split) strides() (outer, inner int) {
	outer, inner = 1, 1
	for d, n := range s.Full {
		switch {
		case d < s.Dim:
			outer *= n
		case d > s.Dim:
			inner *= n
		}
	}
	return outer, inner
}

// Extract copies the shard's part of whole (Full's elements) into shard
// (Shape's elements), zeroing the padding.
func (s Split) Extract(shard, whole []float32) {
	s.each(func(sh, wh []float32, n int) {
		copy(sh[:n], wh[:n])
	}, shard, whole, true)
}

// Insert copies the shard's real elements into their places in whole.
func (s Split) Insert(whole, shard []float32) {
	s.each(func(sh, wh []float32, n int) {
		copy(wh[:n], sh[:n])
	}, shard, whole, false)
}

// each calls f for every contiguous run a box shares between shard and
// whole (n elements from the given starts); with pad, the shard's padding
// is cleared first.
func (s Split) each(f func(sh, wh []float32, n int), shard, whole []float32, pad bool) {
	outer, inner := s.strides()
	full, local := s.Full[s.Dim], s.Blocks*s.Piece()
	if pad {
		clear(shard)
	}
	for o := range outer {
		for _, b := range s.Boxes() {
			if b.Len == 0 {
				continue
			}
			sh := shard[(o*local+b.At)*inner:]
			wh := whole[(o*full+b.Lo)*inner:]
			f(sh, wh, b.Len*inner)
		}
	}
}
