package mesh

import (
	"fmt"

	"github.com/troupe-ml/troupe/failure"
)

// Axis names one dimension of a mesh.
type Axis uint8

const (
	// PP is the pipeline axis: the stages of one replica.
	PP Axis = iota
	// DP is the data-parallel axis: the replicas of one stage.
	DP
	// TP is the tensor-parallel axis: the shards of one stage's layers.
	TP
)

func (a Axis) String() string {
	switch a {
	case PP:
		return "pp"
	case DP:
		return "dp"
	case TP:
		return "tp"
	}
	return fmt.Sprintf("axis(%d)", uint8(a))
}

// MaxSize bounds every axis (and the world).
const MaxSize = 1 << 20

// ErrShape reports a mesh or coordinate out of range.
var ErrShape = failure.New(failure.Config, "mesh: bad shape")

// Mesh is the shape of a world: PP × DP × TP ranks. Ranks are ordered with
// pp outermost and tp innermost, as Megatron-LM orders them:
//
//	rank = (pp·DP + dp)·TP + tp
//
// so a stage's data-parallel group is DP ranks TP apart, a tensor-parallel
// group is TP consecutive ranks, and with TP = 1 replica d's pipeline is
// ranks d, DP+d, 2·DP+d, …
type Mesh struct {
	PP, DP, TP int
}

// New returns the mesh of dp replicas of pp stages, each cut into tp
// shards.
func New(dp, pp, tp int) (Mesh, error) {
	m := Mesh{PP: pp, DP: dp, TP: tp}
	return m, m.Validate()
}

// Of is New for a world without tensor parallelism.
func Of(dp, pp int) (Mesh, error) { return New(dp, pp, 1) }

// Validate checks that every axis has 1 to MaxSize ranks, and the world
// too.
func (m Mesh) Validate() error {
	for _, a := range []Axis{PP, DP, TP} {
		if n := m.Dim(a); n < 1 || n > MaxSize {
			return fmt.Errorf("%w: %s = %d, want 1 to %d", ErrShape, a, n, MaxSize)
		}
	}
	if m.PP*m.DP > MaxSize/m.TP {
		return fmt.Errorf("%w: %s has more than %d ranks", ErrShape, m, MaxSize)
	}
	return nil
}

// Size is the number of ranks.
func (m Mesh) Size() int { return m.PP * m.DP * m.TP }

// Dim is the number of ranks along a.
func (m Mesh) Dim(a Axis) int {
	switch a {
	case PP:
		return m.PP
	case DP:
		return m.DP
	case TP:
		return m.TP
	}
	return 0
}

// String is the shape, e.g. "dp2×pp2" (axes of size 1 other than dp left
// out).
func (m Mesh) String() string {
	s := fmt.Sprintf("dp%d", m.DP)
	if m.PP > 1 {
		s += fmt.Sprintf("×pp%d", m.PP)
	}
	if m.TP > 1 {
		s += fmt.Sprintf("×tp%d", m.TP)
	}
	return s
}

// Coord is a rank's position on every axis.
type Coord struct {
	PP, DP, TP int
}

// At is c's position along a.
func (c Coord) At(a Axis) int {
	switch a {
	case PP:
		return c.PP
	case DP:
		return c.DP
	case TP:
		return c.TP
	}
	return -1
}

func (c Coord) with(a Axis, v int) Coord {
	switch a {
	case PP:
		c.PP = v
	case DP:
		c.DP = v
	case TP:
		c.TP = v
	}
	return c
}

// Contains reports whether c lies on the mesh.
func (m Mesh) Contains(c Coord) bool {
	return c.PP >= 0 && c.PP < m.PP && c.DP >= 0 && c.DP < m.DP && c.TP >= 0 && c.TP < m.TP
}

// Rank is the rank at c (c must lie on the mesh).
func (m Mesh) Rank(c Coord) int { return (c.PP*m.DP+c.DP)*m.TP + c.TP }

// Coord is Rank's inverse (rank must be in [0, Size)).
func (m Mesh) Coord(rank int) Coord {
	return Coord{TP: rank % m.TP, DP: rank / m.TP % m.DP, PP: rank / (m.TP * m.DP)}
}

// Group lists the ranks that share every coordinate of rank but the one
// along a, in order along a: rank's collective group on that axis.
func (m Mesh) Group(a Axis, rank int) []int {
	c := m.Coord(rank)
	out := make([]int, m.Dim(a))
	for i := range out {
		out[i] = m.Rank(c.with(a, i))
	}
	return out
}

// Slice lists the ranks whose coordinate along a is i, in rank order:
// every rank of stage i (PP), or of replica i (DP).
func (m Mesh) Slice(a Axis, i int) []int {
	var out []int
	for r := range m.Size() {
		if m.Coord(r).At(a) == i {
			out = append(out, r)
		}
	}
	return out
}

// Parts is the number of model parts: a rank holds one pipeline stage's
// tensor-parallel shard, and the PP·TP parts of a replica together hold
// the whole model.
func (m Mesh) Parts() int { return m.PP * m.TP }

// Part is the model part rank holds, numbered stage-major: stage·TP +
// shard.
func (m Mesh) Part(rank int) int {
	c := m.Coord(rank)
	return c.PP*m.TP + c.TP
}

// PartRank is the rank of replica dp that holds part.
func (m Mesh) PartRank(part, dp int) int {
	return m.Rank(Coord{PP: part / m.TP, DP: dp, TP: part % m.TP})
}

// ZeRO shard groups cut the data-parallel axis into groups of s
// consecutive replicas; replica dp holds shard dp mod s of its part's
// sharded state, and the ranks holding the same shard of the same part
// (one per shard group) are each other's replicas. A slot names such a
// shard: part·s + shard. With s ≤ 1 nothing is sharded and a slot is a
// part.

// Slots is the number of slots under shard groups of s: Parts()·s.
func (m Mesh) Slots(s int) int { return m.Parts() * max(1, s) }

// Slot is the slot rank holds under shard groups of s.
func (m Mesh) Slot(rank, s int) int {
	s = max(1, s)
	return m.Part(rank)*s + m.Coord(rank).DP%s
}

// SlotRank is the rank that holds slot in shard group g (groups of s).
func (m Mesh) SlotRank(slot, g, s int) int {
	s = max(1, s)
	return m.PartRank(slot/s, g*s+slot%s)
}
