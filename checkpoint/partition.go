package checkpoint

import (
	"fmt"
	"math/bits"
	"sort"
)

// Piece is the block of rows [Lo, Hi) of dimension 0 of specs[Tensor] (a
// scalar has the one row [0, 1)), which one rank writes.
type Piece struct {
	Tensor int
	Lo, Hi int64
}

// Partition splits one stage's tensors among its dp data-parallel ranks,
// so that every rank writes about 1/dp of the bytes and nobody writes
// everything. It is a pure function of (specs, dp): each rank of a
// multi-process world computes the same answer on its own.
//
// The stage's tensors are laid end to end in the order given (parameters,
// then optimizer states) and the byte stream is cut into dp equal ranges;
// each cut moves to the nearest row boundary of the tensor it falls in, so
// every piece is a block of whole rows (a row block [rows, cols…] that
// PyTorch reads as a plain tensor). A rank's bytes therefore differ from
// total/dp by less than one row of the tensors at its two cuts. A tensor
// of zero bytes goes whole to the rank whose range starts at or before it.
// A rank may get no pieces (more ranks than rows).
//
// It returns, for each dp rank, its pieces in tensor order.
func Partition(specs []TensorSpec, dp int) ([][]Piece, error) {
	if dp < 1 {
		return nil, fmt.Errorf("%w: partition over %d ranks", ErrSnapshot, dp)
	}
	n := len(specs)
	pos := make([]int64, n+1) // pos[i] is tensor i's first byte in the stream
	rowBytes := make([]int64, n)
	for i, s := range specs {
		b, ok := s.Bytes()
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q: shape %v overflows", ErrSnapshot, s.Name, s.Shape)
		}
		if pos[i] > (1<<63-1)-b {
			return nil, fmt.Errorf("%w: tensors total more than 2^63 bytes", ErrSnapshot)
		}
		pos[i+1] = pos[i] + b
		rowBytes[i] = RowElems(s.Shape) * int64(s.DType.Size())
	}
	total := pos[n]
	cuts := make([]int64, dp+1)
	cuts[dp] = total
	for k := 1; k < dp; k++ {
		hi, lo := bits.Mul64(uint64(k), uint64(total))
		q, _ := bits.Div64(hi, lo, uint64(dp)) // hi < dp because k < dp
		c := int64(q)
		if c >= total {
			cuts[k] = total
			continue
		}
		// The tensor holding byte c: the first whose end is past c. It has
		// bytes, as a zero-byte tensor ends where it starts.
		i := sort.Search(n, func(i int) bool { return pos[i+1] > c })
		rb := rowBytes[i]
		row := (c - pos[i] + rb/2) / rb
		cuts[k] = pos[i] + row*rb
	}
	out := make([][]Piece, dp)
	for i, s := range specs {
		rows := Rows(s.Shape)
		if pos[i+1] == pos[i] {
			k := sort.Search(dp, func(k int) bool { return cuts[k] > pos[i] }) - 1
			out[k] = append(out[k], Piece{Tensor: i, Lo: 0, Hi: rows})
			continue
		}
		for k := 0; k < dp; k++ {
			lo, hi := max(cuts[k], pos[i]), min(cuts[k+1], pos[i+1])
			if lo >= hi {
				continue
			}
			out[k] = append(out[k], Piece{Tensor: i, Lo: (lo - pos[i]) / rowBytes[i], Hi: (hi - pos[i]) / rowBytes[i]})
		}
	}
	return out, nil
}
