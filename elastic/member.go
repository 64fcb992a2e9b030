package elastic

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// ProtocolVersion is the troupe elastic protocol this build speaks: the
// metadata layout and the rendezvous messages. A member that advertises
// another version is refused (logged, never a peer): an unknown message
// type would crash a protoactor process (DESIGN.md, "pitfalls"). It also
// guards the worker messages agents exchange (workerpb): 2: the leader's
// reports (workerpb.Progress) carry typed metrics and worlds, not JSON.
const ProtocolVersion = 2

// Member is one process start of one node: its identity and what the
// trainer needs to reach it. Members are values; the callee never keeps a
// caller's Devices slice without copying it.
type Member struct {
	// ID is unique per process start ("<Name>-<start>-<random>") and is the
	// memberlist member name: memberlist silently refuses a failed member
	// that comes back under its old name with a new port, so a restarted
	// process must not reuse it.
	ID string
	// Name is the stable node ID (troupe agent --name) that humans read.
	Name string
	// Start orders the incarnations of one Name: the process start time in
	// Unix nanoseconds. A newer incarnation of a Name supersedes an older
	// one still listed as live (a restarted agent replaces itself at once).
	Start int64
	// ActorAddr is the protoactor address of the node's actor system
	// (host:port, or "nonhost" for a local system in tests).
	ActorAddr string
	// DataAddr is the host:port of the node's tensor data plane ("" if none).
	DataAddr string
	// Devices names the node's local devices ("cpu:0", "cuda:1", ...).
	Devices []string
	// Protocol is the troupe elastic protocol version the member speaks.
	Protocol uint32
}

// Less is the stable order of members: by Name, then Start, then ID. The
// leader is the lowest live member and ranks follow this order.
func (m Member) Less(o Member) bool { return compareMembers(m, o) < 0 }

func compareMembers(a, b Member) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Start, b.Start); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// String is the member's ID.
func (m Member) String() string { return m.ID }

// Equal reports whether m and o are the same process start with the same
// advertised addresses and devices.
func (m Member) Equal(o Member) bool {
	return m.ID == o.ID && m.Name == o.Name && m.Start == o.Start && m.ActorAddr == o.ActorAddr &&
		m.DataAddr == o.DataAddr && m.Protocol == o.Protocol && slices.Equal(m.Devices, o.Devices)
}

func (m Member) clone() Member {
	m.Devices = slices.Clone(m.Devices)
	return m
}

// supersedes reports whether m is a newer incarnation of o's Name.
func (m Member) supersedes(o Member) bool {
	return m.Name == o.Name && (m.Start > o.Start || m.Start == o.Start && m.ID > o.ID)
}

// World is one committed generation: who trains, in which rank order.
type World struct {
	// Gen is the generation number: 1 for the first world, one more for
	// each committed change. Zero is "no world yet".
	Gen uint64
	// Members in rank order (Member.Less): rank i is Members[i]. Their
	// addresses and devices are the topology the trainer builds on.
	Members []Member
	// Proposer is the ID of the member that first proposed this world. It
	// alone may propose the next generation without a prepare round.
	Proposer string
	// Reason says why this generation exists ("formed", "join n4",
	// "failed n2", "left n3", "restart n1", "request from n2: ...").
	Reason string
}

// Size is the number of members.
func (w World) Size() int { return len(w.Members) }

// Rank is id's rank in w, or -1.
func (w World) Rank(id string) int {
	for i, m := range w.Members {
		if m.ID == id {
			return i
		}
	}
	return -1
}

// Contains reports whether id is a member of w.
func (w World) Contains(id string) bool { return w.Rank(id) >= 0 }

// IDs lists the members' IDs in rank order.
func (w World) IDs() []string {
	ids := make([]string, len(w.Members))
	for i, m := range w.Members {
		ids[i] = m.ID
	}
	return ids
}

// Equal reports whether w and o are the same world: generation, proposer
// and members (by ID, in order). The Reason is informative only.
func (w World) Equal(o World) bool {
	return w.Gen == o.Gen && w.Proposer == o.Proposer && sameIDs(w.Members, o.Members)
}

// String is "gen 3 [n1 n2 n4]".
func (w World) String() string {
	return fmt.Sprintf("gen %d [%s]", w.Gen, strings.Join(w.IDs(), " "))
}

func (w World) clone() World {
	w.Members = slices.Clone(w.Members)
	for i := range w.Members {
		w.Members[i] = w.Members[i].clone()
	}
	return w
}

func sameIDs(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool { return x.ID == y.ID })
}

// validWorld checks what every world must hold: members in rank order,
// unique IDs, none empty.
func validWorld(w World) error {
	if w.Gen == 0 {
		if len(w.Members) != 0 || w.Proposer != "" {
			return fmt.Errorf("generation 0 has %d members and proposer %q", len(w.Members), w.Proposer)
		}
		return nil
	}
	if len(w.Members) == 0 {
		return fmt.Errorf("generation %d has no members", w.Gen)
	}
	if w.Proposer == "" {
		return fmt.Errorf("generation %d has no proposer", w.Gen)
	}
	for i, m := range w.Members {
		if m.ID == "" || m.Name == "" {
			return fmt.Errorf("generation %d: member %d has an empty ID or name", w.Gen, i)
		}
		if i > 0 && compareMembers(w.Members[i-1], m) >= 0 {
			return fmt.Errorf("generation %d: members %s and %s out of order", w.Gen, w.Members[i-1].ID, m.ID)
		}
		for _, p := range w.Members[:i] {
			if p.ID == m.ID {
				return fmt.Errorf("generation %d: member %s twice", w.Gen, m.ID)
			}
		}
	}
	return nil
}
