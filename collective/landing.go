package collective

import "github.com/troupe-ml/troupe/kernels"

// Landing says where the data messages of an operation that a rank only
// copies land in its buffer, so that a transport reading bytes off a
// socket can read them there at once instead of into a receive buffer the
// Core then copies from: the all-gather's chunks (an AllGather, and the
// second half of a ring AllReduce) and a broadcast's pieces on the ranks
// other than the root. Land returns the slice of the operation's buffer
// that data message seq fills, nil for a message the rank adds rather than
// copies (a reduce-scatter step) or one outside the schedule.
//
// Land is a pure function of the operation's spec and place, safe to call
// from any goroutine while the operation runs.
type Landing struct {
	buf        []float32
	kind       Kind
	rank, size int
	numSub     int
	// first is the first seq that is copied, end one past the last.
	first, end int
}

// LandingOf is the landing of spec started by rank of a group of size
// ranks under cfg; ok is false when none of its messages is a plain copy
// (one rank, a reduction only, recursive doubling, or a 16-bit wire whose
// values arrive packed).
func LandingOf(cfg Config, spec Spec, rank, size int) (l Landing, ok bool) {
	n := len(spec.Buf)
	if size < 2 || spec.Reduce.Wire() != kernels.F32 || spec.Algo == AlgoRecursiveDoubling || spec.Algo == AlgoHierarchical {
		return Landing{}, false
	}
	subElems := cfg.SubChunkBytes / 4
	l = Landing{buf: spec.Buf, kind: spec.Kind, rank: rank, size: size}
	switch spec.Kind {
	case KindAllGather, KindAllReduce:
		_, hi := ChunkRange(n, size, 0)
		l.numSub = subCount(hi, subElems)
		l.first, l.end = 0, (size-1)*l.numSub
		if spec.Kind == KindAllReduce {
			l.first, l.end = (size-1)*l.numSub, 2*(size-1)*l.numSub
		}
	case KindBroadcast:
		if rank == spec.Root {
			return Landing{}, false
		}
		l.numSub = subCount(n, subElems)
		l.first, l.end = 0, l.numSub
	default:
		return Landing{}, false
	}
	return l, true
}

// landing is the Landing of running operation id, by its spec as Start
// settled it (the algorithm chosen); false when it has none or is not
// running.
func (c *Core) landing(id OpID) (Landing, bool) {
	op := c.ops[id.Op]
	if op == nil || op.id != id {
		return Landing{}, false
	}
	return LandingOf(c.cfg, op.spec, c.rank, c.size)
}

// Land is where data message seq lands (nil: it is not a copy).
func (l Landing) Land(seq uint32) []float32 {
	s := int(seq)
	if s < l.first || s >= l.end {
		return nil
	}
	if l.kind == KindBroadcast {
		a, b := subRange(0, len(l.buf), l.numSub, s)
		return l.buf[a:b:b]
	}
	t, k := (s-l.first)/l.numSub+1, (s-l.first)%l.numSub
	lo, hi := ChunkRange(len(l.buf), l.size, AllGatherRecvChunk(l.rank, t, l.size))
	a, b := subRange(lo, hi, l.numSub, k)
	return l.buf[a:b:b]
}

// Placer is an Outbox whose transport reads the copied data of an
// operation straight into its buffer (Landing). The Engine places every
// operation that has a landing once it started, and unplaces it before its
// Handle resolves; Unplace returns once the transport writes into that
// buffer no more.
type Placer interface {
	Place(group uint32, id OpID, l Landing)
	Unplace(group uint32, id OpID)
}

// sameSlice reports whether a and b are the same memory (a payload that a
// transport read in place).
func sameSlice(a, b []float32) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
