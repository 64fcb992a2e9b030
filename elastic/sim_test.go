package elastic

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// sim is a simulated cluster of cores on a simulated network, for the
// interaction scripts and the randomized simulation. Membership is an
// oracle: every node that can reach another sees it up, the way memberlist
// converges; messages wait in one queue until delivered, dropped or
// duplicated, so tests choose every interleaving.
type sim struct {
	cfg   CoreConfig // template for new nodes (Self is set per node)
	nodes map[string]*simNode
	order []string // node IDs in creation order
	net   []Message
	// group is each node's side of a partition; all zero when healed.
	group map[string]int
	out   *strings.Builder
	quiet bool // no output (randomized simulation)

	// Invariant state.
	worlds    map[uint64]World // every world committed anywhere, by generation
	lastGen   map[string]uint64
	violation error
	anyQuorum bool // QuorumAny seen: split brain is allowed
	liveness  bool // the randomized run ended where convergence is expected
}

type simNode struct {
	m    Member
	core *Core
	up   bool
	// leaving: Leave was called; the node goes (its peers see it leave)
	// once it committed a world without itself.
	leaving bool
}

func newSim() *sim {
	return &sim{cfg: DefaultCoreConfig(), nodes: map[string]*simNode{}, group: map[string]int{},
		out: &strings.Builder{}, worlds: map[uint64]World{}, lastGen: map[string]uint64{}}
}

func (s *sim) printf(format string, args ...any) {
	if !s.quiet {
		fmt.Fprintf(s.out, format, args...)
	}
}

// upIDs lists the live nodes in creation order.
func (s *sim) upIDs() []string {
	var ids []string
	for _, id := range s.order {
		if s.nodes[id].up {
			ids = append(ids, id)
		}
	}
	return ids
}

func (s *sim) reach(a, b string) bool { return s.group[a] == s.group[b] }

// start creates a node (name, incarnation) and makes it and every node it
// can reach see each other.
func (s *sim) start(name string, inc int) error {
	id := name
	if inc > 1 {
		id = fmt.Sprintf("%s@%d", name, inc)
	}
	if _, ok := s.nodes[id]; ok {
		return fmt.Errorf("node %s exists", id)
	}
	up := s.upIDs()
	if len(up) == 0 {
		// Every node of the cluster is gone: this one starts a new cluster,
		// whose generations start again at 1.
		clear(s.worlds)
	} else if !slices.ContainsFunc(up, func(o string) bool { return s.group[o] == 0 }) {
		// The shell's Join fails when no seed answers (ErrJoin): a node
		// that reaches no live node does not start.
		return fmt.Errorf("%s reaches no live node: its join fails", id)
	}
	cfg := s.cfg
	cfg.Self = Member{ID: id, Name: name, Start: int64(inc)}
	c, err := NewCore(cfg)
	if err != nil {
		return err
	}
	n := &simNode{m: cfg.Self, core: c, up: true}
	s.nodes[id] = n
	s.order = append(s.order, id)
	s.group[id] = 0
	s.flush(n)
	seed := ""
	for _, o := range s.upIDs() {
		if o != id && s.reach(o, id) {
			s.memberUp(s.nodes[o], n)
			s.memberUp(n, s.nodes[o])
			if seed == "" {
				seed = o
			}
		}
	}
	if seed != "" {
		s.pushPull(s.nodes[seed], n)
	}
	n.core.Start()
	s.flush(n)
	return nil
}

// pushPull models memberlist's state exchange when a node joins through
// a seed, or two nodes reconnect: each shell sends its core's State along
// (Delegate.LocalState), so a node that joins a formed cluster knows at
// once that it must not form a world of its own. Exchanges that change
// nothing are not printed.
func (s *sim) pushPull(a, b *simNode) {
	ma, mb := a.core.State(), b.core.State()
	for _, p := range []struct {
		to *simNode
		m  Message
	}{{b, ma}, {a, mb}} {
		before := p.to.core.State()
		p.m.To = p.to.m.ID
		p.to.core.Step(p.m)
		if after := p.to.core.State(); !after.Base.Equal(before.Base) || after.Accepted != before.Accepted {
			s.printf("%s (push-pull)\n", p.m)
		}
		s.flush(p.to)
	}
}

// memberUp: a sees b live, and leaving if b announced it (memberlist's
// metadata carries the flag).
func (s *sim) memberUp(a, b *simNode) {
	a.core.MemberUp(b.m)
	if b.leaving {
		a.core.MemberLeaving(b.m.ID)
	}
	s.flush(a)
}

// leave starts node id's graceful leave: it stops leading, the nodes that
// reach it learn that it leaves (its notice), and it goes once it
// committed a world without itself (goLeavers).
func (s *sim) leave(id string) error {
	n, ok := s.nodes[id]
	if !ok || !n.up {
		return fmt.Errorf("no live node %s", id)
	}
	n.leaving = true
	n.core.Leave()
	s.flush(n)
	for _, o := range s.upIDs() {
		if o != id && s.reach(o, id) {
			s.nodes[o].core.MemberLeaving(id)
			s.flush(s.nodes[o])
		}
	}
	s.goLeavers()
	return nil
}

// goLeavers takes down the leaving nodes that committed a world without
// themselves; the nodes that reach them see them leave.
func (s *sim) goLeavers() {
	for _, id := range s.upIDs() {
		if n := s.nodes[id]; n.leaving && n.up && n.core.committed.Gen > 0 && !n.core.committed.Contains(id) {
			s.printf("  %s goes: it committed %s\n", id, n.core.committed)
			_ = s.stop(id, true)
		}
	}
}

// stop takes a node down; the others see it fail or leave.
func (s *sim) stop(id string, left bool) error {
	if err := s.kill(id); err != nil {
		return err
	}
	s.detect(id, left)
	return nil
}

// kill stops a node's process without anyone noticing yet.
func (s *sim) kill(id string) error {
	n, ok := s.nodes[id]
	if !ok || !n.up {
		return fmt.Errorf("no live node %s", id)
	}
	n.up = false
	return nil
}

// detect makes the nodes that reach id see it fail (or leave).
func (s *sim) detect(id string, left bool) {
	for _, o := range s.upIDs() {
		if s.reach(o, id) {
			s.nodes[o].core.MemberDown(id, left)
			s.flush(s.nodes[o])
		}
	}
}

// partition splits the nodes into groups; each sees the others fail.
func (s *sim) partition(groups [][]string) {
	s.heal()
	side := map[string]int{}
	for g, ids := range groups {
		for _, id := range ids {
			side[id] = g + 1
		}
	}
	up := s.upIDs()
	for _, a := range up {
		for _, b := range up {
			if a != b && side[a] != side[b] {
				s.nodes[a].core.MemberDown(b, false)
				s.flush(s.nodes[a])
			}
		}
	}
	for _, id := range s.order {
		s.group[id] = side[id]
	}
}

// heal reconnects everything; nodes see each other again.
func (s *sim) heal() {
	before := maps2(s.group)
	for id := range s.group {
		s.group[id] = 0
	}
	up := s.upIDs()
	for _, a := range up {
		for _, b := range up {
			if a != b && before[a] != before[b] {
				s.memberUp(s.nodes[a], s.nodes[b])
			}
		}
	}
	for _, a := range up {
		for _, b := range up {
			if a < b && before[a] != before[b] {
				s.pushPull(s.nodes[a], s.nodes[b])
			}
		}
	}
}

func maps2(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// flush moves a core's output to the network and prints its events.
func (s *sim) flush(n *simNode) {
	rd := n.core.Ready()
	s.net = append(s.net, rd.Messages...)
	for _, e := range rd.Events {
		s.printf("  %s: %s\n", n.m.ID, e)
		if e.Kind == EventCommitted {
			s.observe(n.m.ID, e.World)
		}
	}
	s.check(n)
}

// deliverAt hands the i-th queued message to its destination.
func (s *sim) deliverAt(i int) {
	m := s.net[i]
	s.net = slices.Delete(s.net, i, i+1)
	to, ok := s.nodes[m.To]
	switch {
	case !ok || !to.up:
		s.printf("%s (dropped: %s is down)\n", m, m.To)
		return
	case !s.reach(m.From, m.To):
		s.printf("%s (dropped: partition)\n", m)
		return
	}
	s.printf("%s\n", m)
	to.core.Step(m)
	s.flush(to)
}

// deliverAll delivers in order until the network is empty or limit
// messages went (limit < 0: no limit); it reports how many.
func (s *sim) deliverAll(limit int) int {
	n := 0
	for len(s.net) > 0 && (limit < 0 || n < limit) {
		s.deliverAt(0)
		n++
		if n > 100000 {
			s.violation = fmt.Errorf("no quiescence after 100000 messages")
			return n
		}
	}
	return n
}

func (s *sim) tick() {
	for _, id := range s.upIDs() {
		n := s.nodes[id]
		n.core.Tick()
		s.flush(n)
	}
}

// observe records a commit and checks the safety invariants: one world per
// generation everywhere; a node's generations only grow; with a majority
// quorum, a world holds a strict majority of the previous one; sizes
// within MinNodes..MaxNodes.
func (s *sim) observe(id string, w World) {
	if s.violation != nil {
		return
	}
	if w.Gen <= s.lastGen[id] {
		s.violation = fmt.Errorf("%s committed %s after generation %d", id, w, s.lastGen[id])
		return
	}
	s.lastGen[id] = w.Gen
	if old, ok := s.worlds[w.Gen]; ok {
		if !old.Equal(w) && !s.anyQuorum {
			s.violation = fmt.Errorf("two worlds for generation %d: %s by %s and %s by %s (at %s)", w.Gen, old, old.Proposer, w, w.Proposer, id)
		}
		return
	}
	s.worlds[w.Gen] = w.clone()
	if n := len(w.Members); n < s.cfg.MinNodes || s.cfg.MaxNodes > 0 && n > s.cfg.MaxNodes {
		s.violation = fmt.Errorf("%s has %d members, want %d..%d", w, n, s.cfg.MinNodes, s.cfg.MaxNodes)
	}
	if prev, ok := s.worlds[w.Gen-1]; ok && !s.anyQuorum {
		// Members that left gracefully answered as acceptors until this
		// world committed: with them, it holds a majority of the last.
		k := 0
		for _, m := range prev.Members {
			if n := s.nodes[m.ID]; w.Contains(m.ID) || n != nil && n.leaving {
				k++
			}
		}
		if 2*k <= len(prev.Members) {
			s.violation = fmt.Errorf("%s holds %d of the %d members of %s (with those leaving)", w, k, len(prev.Members), prev)
		}
	}
}

func (s *sim) check(n *simNode) {
	if s.violation != nil {
		return
	}
	if g := n.core.committed.Gen; g < s.lastGen[n.m.ID] {
		s.violation = fmt.Errorf("%s went back to generation %d", n.m.ID, g)
	}
}

// state prints every node's status.
func (s *sim) state() {
	for _, id := range s.order {
		n := s.nodes[id]
		if !n.up {
			s.printf("%s: down\n", id)
			continue
		}
		st := n.core.Status()
		fmt.Fprintf(s.out, "%s: %s by %s; leader %s; view [%s]", id, st.Committed, orDash(st.Committed.Proposer), orDash(st.Leader), strings.Join(st.View, " "))
		if len(st.Leaving) > 0 {
			fmt.Fprintf(s.out, "; leaving [%s]", strings.Join(st.Leaving, " "))
		}
		if st.Phase != "idle" {
			fmt.Fprintf(s.out, "; %s b%s", st.Phase, st.Ballot)
		}
		if !st.Promised.IsZero() {
			fmt.Fprintf(s.out, "; promised b%s", st.Promised)
		}
		if st.Accepted.Gen > 0 {
			fmt.Fprintf(s.out, "; accepted %s at b%s", st.Accepted, st.AcceptedBallot)
		}
		if st.Held {
			s.printf("; held")
		}
		if st.Pending {
			s.printf("; ack pending")
		}
		if st.Waiting != "" {
			fmt.Fprintf(s.out, "; waiting (%s)", st.Waiting)
		}
		if s.group[id] != 0 {
			fmt.Fprintf(s.out, "; side %d", s.group[id])
		}
		fmt.Fprintln(s.out)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// converged reports whether every live node has committed the same world
// and that world is the one the live nodes call for.
func (s *sim) converged() error {
	up := s.upIDs()
	if len(up) == 0 {
		return nil
	}
	first := s.nodes[up[0]].core.Status().Committed
	for _, id := range up[1:] {
		if w := s.nodes[id].core.Status().Committed; !w.Equal(first) {
			return fmt.Errorf("%s holds %s, %s holds %s", up[0], first, id, w)
		}
	}
	want := slices.Clone(up)
	// Members are ordered by name, then incarnation.
	sort.Slice(want, func(i, j int) bool { return compareMembers(s.nodes[want[i]].m, s.nodes[want[j]].m) < 0 })
	if s.cfg.MaxNodes == 0 || len(up) <= s.cfg.MaxNodes {
		if !slices.Equal(first.IDs(), want) {
			return fmt.Errorf("live nodes [%s] committed %s", strings.Join(want, " "), first)
		}
	} else if first.Size() != s.cfg.MaxNodes {
		return fmt.Errorf("%d live nodes, max %d, committed %s", len(up), s.cfg.MaxNodes, first)
	}
	return nil
}
