package collective

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"
)

// Flight-recorder states of an operation on one rank.
const (
	// FlightRunning: the rank entered the operation and it has not
	// resolved.
	FlightRunning = "running"
	// FlightDone: the operation completed on the rank.
	FlightDone = "done"
	// FlightFailed: the operation failed on the rank (Err says why).
	FlightFailed = "failed"
)

// FlightOp is what a rank's flight recorder keeps of one collective
// operation: which (group, generation, op id), what (kind, bytes), how
// far it got (state) and when.
type FlightOp struct {
	// Seq numbers the operations this rank entered, in order, from 0.
	Seq   uint64 `json:"seq"`
	Group uint32 `json:"group"`
	Gen   uint64 `json:"gen"`
	Op    uint64 `json:"op"`
	Kind  string `json:"kind"`
	// Bytes is the size of the operation's buffer.
	Bytes int64     `json:"bytes"`
	State string    `json:"state"`
	Start time.Time `json:"start"`
	// End is when it resolved (zero while running).
	End time.Time `json:"end,omitzero"`
	// Err is why it failed; Culprit the world rank its failure blames (a
	// silent or lost peer; −1: none).
	Err     string `json:"error,omitempty"`
	Culprit int    `json:"culprit"`
}

// Duration is how long the operation ran (until now while running).
func (o *FlightOp) Duration(now time.Time) time.Duration {
	if o.End.IsZero() {
		return now.Sub(o.Start)
	}
	return o.End.Sub(o.Start)
}

// FlightGroup is a group as a rank knows it: its id and its members' world
// ranks, in group order.
type FlightGroup struct {
	ID      uint32 `json:"id"`
	Members []int  `json:"members"`
}

// FlightDump is one rank's flight recorder at one moment: what
// `troupe explain hang` aligns with the other ranks'.
type FlightDump struct {
	// Rank is the rank's world rank, Size the world's; Name names it for
	// people (a node, a member).
	Rank int    `json:"rank"`
	Size int    `json:"size"`
	Name string `json:"name,omitempty"`
	// Time is when the dump was taken, Reason why.
	Time   time.Time     `json:"time"`
	Reason string        `json:"reason,omitempty"`
	Groups []FlightGroup `json:"groups"`
	// Ops are the last operations the rank entered, oldest first; Dropped
	// counts the older ones no longer kept.
	Ops     []FlightOp `json:"ops"`
	Dropped uint64     `json:"dropped"`
}

// DefaultFlightOps is how many operations a flight recorder keeps by
// default: a few steps' worth of buckets and ZeRO-3 gathers, some
// hundred kilobytes.
const DefaultFlightOps = 1024

// FlightRecorder keeps the last operations one rank entered, always on:
// the Engine records each operation as it starts and as it resolves (a
// lock and a few stores), and Dump copies the record for a person or for
// the alignment of every rank's dumps that names the rank a hang waits on.
// It is safe for concurrent use.
type FlightRecorder struct {
	mu     sync.Mutex
	rank   int
	size   int
	ops    []FlightOp // ring of cap entries; ops[seq % cap]
	next   uint64
	open   map[flightKey]uint64
	groups map[uint32][]int
}

type flightKey struct {
	group   uint32
	gen, op uint64
}

// NewFlightRecorder returns the recorder of world rank rank among size,
// keeping the last keep operations (DefaultFlightOps when keep ≤ 0).
func NewFlightRecorder(rank, size, keep int) *FlightRecorder {
	if keep <= 0 {
		keep = DefaultFlightOps
	}
	return &FlightRecorder{rank: rank, size: size, ops: make([]FlightOp, 0, keep),
		open: map[flightKey]uint64{}, groups: map[uint32][]int{}}
}

// group records a group's members.
func (r *FlightRecorder) group(id uint32, members []int) {
	r.mu.Lock()
	r.groups[id] = slices.Clone(members)
	r.mu.Unlock()
}

// start records that the rank entered operation id of group.
func (r *FlightRecorder) start(now time.Time, group uint32, id OpID, kind Kind, values int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := FlightOp{Seq: r.next, Group: group, Gen: id.Gen, Op: id.Op, Kind: kind.String(), Bytes: 4 * int64(values),
		State: FlightRunning, Start: now, Culprit: -1}
	if len(r.ops) < cap(r.ops) {
		r.ops = append(r.ops, op)
	} else {
		old := &r.ops[r.next%uint64(cap(r.ops))]
		if old.State == FlightRunning {
			delete(r.open, flightKey{old.Group, old.Gen, old.Op})
		}
		*old = op
	}
	r.open[flightKey{group, id.Gen, id.Op}] = r.next
	r.next++
}

// finish records that operation id of group resolved with err; culprit is
// the world rank its failure blames (−1: none).
func (r *FlightRecorder) finish(now time.Time, group uint32, id OpID, err error, culprit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := flightKey{group, id.Gen, id.Op}
	seq, ok := r.open[k]
	if !ok {
		return
	}
	delete(r.open, k)
	op := &r.ops[seq%uint64(cap(r.ops))]
	op.End = now
	op.State = FlightDone
	if err != nil {
		op.State, op.Err, op.Culprit = FlightFailed, err.Error(), culprit
	}
}

// Next is the sequence number the next operation will get: a mark for
// Since.
func (r *FlightRecorder) Next() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Since yields the operations entered from mark (see Next) on that have
// resolved, oldest first: a step's collectives. The recorder is locked
// while it yields, so the loop's body must not call it.
func (r *FlightRecorder) Since(mark uint64) iter.Seq[FlightOp] {
	return func(yield func(FlightOp) bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		first := max(mark, r.next-uint64(len(r.ops)))
		for s := first; s < r.next; s++ {
			if op := r.ops[s%uint64(cap(r.ops))]; op.State != FlightRunning && !yield(op) {
				return
			}
		}
	}
}

// Dump copies the recorder, stamped now with reason.
func (r *FlightRecorder) Dump(now time.Time, reason string) FlightDump {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := FlightDump{Rank: r.rank, Size: r.size, Time: now, Reason: reason, Groups: []FlightGroup{}, Ops: []FlightOp{}}
	for id, m := range r.groups {
		d.Groups = append(d.Groups, FlightGroup{ID: id, Members: slices.Clone(m)})
	}
	slices.SortFunc(d.Groups, func(a, b FlightGroup) int { return cmpUint32(a.ID, b.ID) })
	first := r.next - uint64(len(r.ops))
	d.Dropped = first
	for s := first; s < r.next; s++ {
		d.Ops = append(d.Ops, r.ops[s%uint64(cap(r.ops))])
	}
	return d
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ErrBadDump: bytes that do not hold a flight-recorder dump.
var ErrBadDump = errors.New("collective: not a flight-recorder dump")

// maxDumpRanks bounds a dump's world size and group members (a corrupt
// file must not make the alignment allocate per rank without end).
const maxDumpRanks = 1 << 16

// ParseFlightDump reads a dump written as JSON (WriteJSON's form) and
// checks that it is one: ranks within the world, known kinds and states,
// groups that hold the rank, each op's group known.
func ParseFlightDump(b []byte) (FlightDump, error) {
	var d FlightDump
	if err := json.Unmarshal(b, &d); err != nil {
		return FlightDump{}, fmt.Errorf("%w: %v", ErrBadDump, err)
	}
	if d.Size < 1 || d.Size > maxDumpRanks || d.Rank < 0 || d.Rank >= d.Size {
		return FlightDump{}, fmt.Errorf("%w: rank %d of a world of %d", ErrBadDump, d.Rank, d.Size)
	}
	groups := map[uint32]bool{}
	for _, g := range d.Groups {
		if groups[g.ID] {
			return FlightDump{}, fmt.Errorf("%w: group %d listed twice", ErrBadDump, g.ID)
		}
		groups[g.ID] = true
		seen := map[int]bool{}
		for _, m := range g.Members {
			if m < 0 || m >= d.Size || seen[m] {
				return FlightDump{}, fmt.Errorf("%w: group %d: member %d is out of [0, %d) or repeated", ErrBadDump, g.ID, m, d.Size)
			}
			seen[m] = true
		}
		if !seen[d.Rank] {
			return FlightDump{}, fmt.Errorf("%w: group %d does not hold rank %d", ErrBadDump, g.ID, d.Rank)
		}
	}
	for i, op := range d.Ops {
		if !groups[op.Group] {
			return FlightDump{}, fmt.Errorf("%w: op %d: group %d is not listed", ErrBadDump, i, op.Group)
		}
		if _, ok := ParseKind(op.Kind); !ok {
			return FlightDump{}, fmt.Errorf("%w: op %d: kind %q", ErrBadDump, i, op.Kind)
		}
		switch op.State {
		case FlightRunning, FlightDone, FlightFailed:
		default:
			return FlightDump{}, fmt.Errorf("%w: op %d: state %q", ErrBadDump, i, op.State)
		}
		if op.Culprit < -1 || op.Culprit >= d.Size {
			return FlightDump{}, fmt.Errorf("%w: op %d: culprit %d", ErrBadDump, i, op.Culprit)
		}
		if i > 0 && op.Seq <= d.Ops[i-1].Seq {
			return FlightDump{}, fmt.Errorf("%w: op %d: sequence %d after %d", ErrBadDump, i, op.Seq, d.Ops[i-1].Seq)
		}
	}
	return d, nil
}

// ParseKind reads a kind's name (Kind.String).
func ParseKind(s string) (Kind, bool) {
	for k := Kind(1); k < kindEnd; k++ {
		if kindNames[k] == s {
			return k, true
		}
	}
	return 0, false
}
