package checkpoint

import (
	"fmt"
	"sort"
	"strings"
)

// Read is one copy from a checkpoint to a destination buffer: Len bytes
// from SrcOff bytes into slice Slice of tensor Tensor (stored in File) to
// DstOff bytes into the destination.
type Read struct {
	Tensor string
	Slice  int
	File   string
	SrcOff int64
	DstOff int64
	Len    int64
}

// PlanRead returns the reads that fill a buffer with the elements [start,
// stop) of the row-major flattening of tensor name, from whichever slices
// hold them. A pure function of the manifest: it is how a rank of any
// layout finds its data in a checkpoint written by any other.
func (m *Manifest) PlanRead(name string, start, stop int64) ([]Read, error) {
	t, ok := m.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint has no tensor %q", ErrMismatch, name)
	}
	spec := TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	total, _ := spec.Bytes()
	es := int64(t.DType.Size())
	if start < 0 || stop < start || stop*es > total {
		return nil, fmt.Errorf("%w: elements [%d, %d) outside tensor %q of %d elements", ErrMismatch, start, stop, name, total/es)
	}
	if start == stop {
		return nil, nil
	}
	for _, s := range t.Slices {
		if !wholeRows(s, t.Shape) {
			return nil, fmt.Errorf("%w: tensor %q is stored in blocks of columns (tensor-parallel shards), not element ranges: read it with ReadBox", ErrMismatch, name)
		}
	}
	// The first slice that ends after start; slices are sorted and tile.
	i := sort.Search(len(t.Slices), func(i int) bool {
		_, e := t.Slices[i].Elements(t.Shape)
		return e > start
	})
	var out []Read
	for ; i < len(t.Slices); i++ {
		s := t.Slices[i]
		lo, hi := s.Elements(t.Shape)
		if lo >= stop {
			break
		}
		a, b := max(lo, start), min(hi, stop)
		out = append(out, Read{Tensor: name, Slice: i, File: s.File,
			SrcOff: (a - lo) * es, DstOff: (a - start) * es, Len: (b - a) * es})
	}
	return out, nil
}

// Target is the layout a checkpoint is loaded into: DP data-parallel
// replicas of each of PP pipeline stages, stage s holding the parameters
// Bounds[s] to Bounds[s+1]−1 of the checkpoint's parameter order
// (Manifest.Params). Ranks are stage-major (rank = stage·DP + dpRank), as in
// World.
type Target struct {
	DP, PP int
	Bounds []int
}

// Validate checks the target against a checkpoint with params parameters.
func (t Target) Validate(params int) error {
	if t.DP < 1 || t.PP < 1 {
		return fmt.Errorf("%w: target dp=%d pp=%d, both must be ≥ 1", ErrMismatch, t.DP, t.PP)
	}
	if len(t.Bounds) != t.PP+1 || t.Bounds[0] != 0 || t.Bounds[t.PP] != params {
		return fmt.Errorf("%w: target stage bounds %v: want %d entries from 0 to the checkpoint's %d parameters",
			ErrMismatch, t.Bounds, t.PP+1, params)
	}
	for s := 0; s < t.PP; s++ {
		if t.Bounds[s] > t.Bounds[s+1] {
			return fmt.Errorf("%w: target stage bounds %v decrease", ErrMismatch, t.Bounds)
		}
	}
	return nil
}

// TensorRead is everything one tensor needs: fill a buffer of Bytes bytes
// by running Reads.
type TensorRead struct {
	Name  string
	Bytes int64
	Reads []Read
}

// PlanRank returns the reads that give rank of target its whole state: each
// parameter of its stage and, when the checkpoint has an optimizer, that
// parameter's optimizer states ("optim.<state>.<param>", in the order of
// Manifest.Optimizer.States), each whole, since data-parallel replicas hold
// full copies. It is a pure function of (manifest, target, rank).
func (m *Manifest) PlanRank(target Target, rank int) ([]TensorRead, error) {
	params := m.Params()
	if err := target.Validate(len(params)); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= target.DP*target.PP {
		return nil, fmt.Errorf("%w: rank %d outside a target of %d ranks", ErrMismatch, rank, target.DP*target.PP)
	}
	stage := rank / target.DP
	mine := params[target.Bounds[stage]:target.Bounds[stage+1]]
	names := append([]string(nil), mine...)
	if m.Optimizer != nil {
		for _, st := range m.Optimizer.States {
			for _, p := range mine {
				names = append(names, OptimName(st, p))
			}
		}
	}
	out := make([]TensorRead, 0, len(names))
	for _, name := range names {
		t, ok := m.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("%w: checkpoint has no tensor %q", ErrMismatch, name)
		}
		b, _ := TensorSpec{DType: t.DType, Shape: t.Shape}.Bytes()
		reads, err := m.PlanRead(name, 0, b/int64(t.DType.Size()))
		if err != nil {
			return nil, err
		}
		out = append(out, TensorRead{Name: name, Bytes: b, Reads: reads})
	}
	return out, nil
}

// isParam reports whether a tensor name is a parameter's (not an optimizer
// state's).
func isParam(name string) bool { return !strings.HasPrefix(name, OptimPrefix) }
