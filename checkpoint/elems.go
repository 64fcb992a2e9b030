package checkpoint

import "github.com/troupe-ml/troupe/nn"

// placed is a block of a whole tensor that a run of a part's elements
// holds: the block's offsets and sizes in the whole tensor, and where its
// first element sits in the run (the block's elements are consecutive in
// the run, row-major).
type placed struct {
	Off, Size []int
	At        int
}

// elementBlocks cuts the elements [lo, hi) of a part of shape local (the
// row-major order of a tensor-parallel shard when split is not nil, else
// of the whole tensor) into blocks of the whole tensor: a partial first
// row, whole rows, a partial last row (recursively for more dimensions),
// each mapped through split to the whole tensor's coordinates; padding
// rows map to nothing. It is how a ZeRO shard of optimizer state, a flat
// range cutting rows anywhere, is stored and read by block.
func elementBlocks(local []int, split *nn.Split, lo, hi int) []placed {
	var out []placed
	var cut func(prefix []int, shape []int, lo, hi, at int)
	cut = func(prefix, shape []int, lo, hi, at int) {
		if lo >= hi {
			return
		}
		if len(shape) <= 1 {
			off := append(append([]int(nil), prefix...), lo)
			size := append(make([]int, len(prefix)), hi-lo)
			for i := range prefix {
				size[i] = 1
			}
			if len(shape) == 0 {
				off, size = append([]int(nil), prefix...), make([]int, len(prefix))
				for i := range size {
					size[i] = 1
				}
			}
			out = append(out, placed{Off: off, Size: size, At: at})
			return
		}
		row := 1
		for _, d := range shape[1:] {
			row *= d
		}
		r0, r1 := lo/row, (hi-1)/row // rows touched
		if lo%row != 0 || r0 == r1 && hi%row != 0 {
			// A partial first row.
			end := min(hi, (r0+1)*row)
			cut(append(append([]int(nil), prefix...), r0), shape[1:], lo-r0*row, end-r0*row, at)
			at += end - lo
			lo = end
			r0++
		}
		whole := hi / row // rows [r0, whole) are whole
		if whole > r0 {
			off := append(append([]int(nil), prefix...), r0)
			size := append(make([]int, len(prefix)), whole-r0)
			for i := range prefix {
				size[i] = 1
			}
			for _, d := range shape[1:] {
				off = append(off, 0)
				size = append(size, d)
			}
			out = append(out, placed{Off: off, Size: size, At: at})
			at += (whole - r0) * row
			lo = whole * row
		}
		if lo < hi {
			// A partial last row.
			cut(append(append([]int(nil), prefix...), lo/row), shape[1:], 0, hi-lo, at)
		}
	}
	cut(nil, local, lo, hi, 0)
	if split == nil {
		return out
	}
	// Map the shard's blocks to the whole tensor: along the cut dimension
	// through the split's boxes (a block may fall in several, or in the
	// padding), elsewhere as they are.
	var mapped []placed
	d := split.Dim
	stride := 1 // elements of the block per step along d
	for _, pl := range out {
		stride = 1
		for i := d + 1; i < len(pl.Size); i++ {
			stride *= pl.Size[i]
		}
		for _, b := range split.Boxes() {
			a, z := max(pl.Off[d], b.At), min(pl.Off[d]+pl.Size[d], b.At+b.Len)
			if a >= z {
				continue
			}
			// Along d the block is split only when d is its outermost
			// partial dimension, which keeps each piece's elements
			// consecutive: dimension 0 for row blocks, or the run inside
			// one row.
			off, size := append([]int(nil), pl.Off...), append([]int(nil), pl.Size...)
			off[d], size[d] = b.Lo+(a-b.At), z-a
			mapped = append(mapped, placed{Off: off, Size: size, At: pl.At + (a-pl.Off[d])*stride})
		}
	}
	return mapped
}
