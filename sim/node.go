package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/train/leader"
)

// Timings of the simulated job (virtual time).
const (
	tickEvery    = 100 * time.Millisecond // the shells' tick (agent.run, the membership)
	detectAfter  = time.Second            // memberlist's suspicion: silence before a peer is failed
	leaveTimeout = 5 * time.Second        // the agent's Node.Leave: the longest a leaver waits for a world without it
	callTimeout  = 3 * time.Second        // the leader's calls to its members
	stepTime     = 40 * time.Millisecond  // a step's forward and backward
	stepTimeout  = 3 * time.Second        // the leader's wait for a step
	collTimeout  = 2 * time.Second        // the collective core's silence bound
)

// node is one simulated process: its membership, rendezvous core, leader
// core and worker.
type node struct {
	s    *sim
	id   string
	name string
	inc  int
	up   bool
	hung bool
	// held runs what arrives while the node hangs, at its resume.
	held []func()
	// leaving: the node announced a graceful leave (at its next step
	// boundary); it answers as an acceptor until it committed a world
	// without itself, or leaveTimeout passed since leavingAt, and then it
	// goes (left).
	leaving   bool
	leavingAt time.Duration
	left      bool
	// toldLeaving: the peers whose leave this node's core heard.
	toldLeaving map[string]bool
	done        bool
	err         error

	core *elastic.Core
	// seen is the membership as memberlist shows it to this node; silent
	// since when an unreachable peer was first missed.
	seen   map[string]bool
	silent map[string]time.Duration

	world elastic.World
	lead  *leader.Core
	shell leaderShell
	w     member
}

func (n *node) member() elastic.Member {
	return elastic.Member{ID: n.id, Name: n.name, Start: int64(n.inc), ActorAddr: n.id}
}

// startNode starts an incarnation of node name; it joins through a live
// node it reaches (false when it reaches none, as memberlist's Join fails).
func (s *sim) startNode(name string, inc int) bool {
	id := name
	if inc > 1 {
		id = fmt.Sprintf("%s@%d", name, inc)
	}
	if live := s.live(); len(live) > 0 && !slices.ContainsFunc(live, func(o *node) bool { return !o.hung && s.side[o.name] == s.side[name] }) {
		return false
	}
	cfg := elastic.DefaultCoreConfig()
	cfg.MinNodes = s.cfg.MinNodes
	cfg.Self = elastic.Member{ID: id, Name: name, Start: int64(inc), ActorAddr: id}
	c, err := elastic.NewCore(cfg)
	if err != nil {
		panic(err) // the configuration is the simulator's own
	}
	n := &node{s: s, id: id, name: name, inc: inc, up: true, core: c, seen: map[string]bool{}, silent: map[string]time.Duration{}, toldLeaving: map[string]bool{}}
	n.lead = leader.New(s.leaderConfig(), s.clk.time())
	n.shell.n = n
	n.w = newMember(n)
	s.nodes[id] = n
	s.order = append(s.order, id)
	s.tracef("%s starts", id)
	// memberlist's join: the node and the nodes it reaches see each other,
	// and exchange their states (push/pull).
	for _, o := range s.live() {
		if o != n && s.reach(o.id, n.id) && !o.hung {
			n.see(o)
			o.see(n)
		}
	}
	n.core.Start()
	n.flush()
	n.scheduleTick()
	return true
}

// live lists the nodes up, in creation order.
func (s *sim) live() []*node {
	var out []*node
	for _, id := range s.order {
		if n := s.nodes[id]; n.up {
			out = append(out, n)
		}
	}
	return out
}

func (s *sim) nameOf(id string) string {
	if n := s.nodes[id]; n != nil {
		return n.name
	}
	return id
}

// atNode runs fn on n now, or at its resume while it hangs; never once it
// is down.
func (s *sim) atNode(n *node, fn func()) {
	switch {
	case !n.up:
	case n.hung:
		n.held = append(n.held, fn)
	default:
		fn()
	}
}

func (n *node) scheduleTick() {
	n.s.clk.after(tickEvery, func() {
		if !n.up {
			return
		}
		if !n.hung && !n.done {
			n.tick()
		}
		n.scheduleTick()
	})
}

// tick is the node's periodic work: the membership's failure detection,
// the cores' clocks.
func (n *node) tick() {
	s := n.s
	for _, id := range s.order {
		o := s.nodes[id]
		if o == n {
			continue
		}
		reach := o.up && !o.hung && s.reach(n.id, o.id)
		switch {
		case reach && !n.seen[id]:
			n.see(o)
		case reach:
			delete(n.silent, id)
			n.heardLeaving(o)
		case n.seen[id] && o.left:
			n.unsee(id, true)
		case n.seen[id]:
			since, ok := n.silent[id]
			if !ok {
				n.silent[id] = s.clk.now
			} else if s.clk.now-since >= detectAfter {
				n.unsee(id, false)
			}
		}
	}
	n.core.Tick()
	n.flush()
	if n.leaving && !n.left {
		if w := n.core.Committed(); w.Gen > 0 && !w.Contains(n.id) || s.clk.now-n.leavingAt >= leaveTimeout {
			s.tracef("%s goes (committed %s)", n.id, w)
			n.left = true
			s.clk.after(100*time.Millisecond, func() { n.up = false })
		}
	}
	n.lead.Tick(s.clk.time())
	n.shell.tick()
	n.w.tick()
	n.shell.apply()
}

// see makes o a member of n's view, with memberlist's push/pull exchange
// of the rendezvous states.
func (n *node) see(o *node) {
	n.seen[o.id] = true
	delete(n.silent, o.id)
	n.core.MemberUp(o.member())
	n.flush()
	st := o.core.State()
	st.To = n.id
	n.core.Step(st)
	n.flush()
	n.heardLeaving(o)
}

// heardLeaving: n learns that o leaves (its notice, or its metadata's
// flag).
func (n *node) heardLeaving(o *node) {
	if o.leaving && !o.left && !n.toldLeaving[o.id] {
		n.toldLeaving[o.id] = true
		n.core.MemberLeaving(o.id)
		n.flush()
	}
}

// unsee: memberlist reports o failed (or left).
func (n *node) unsee(id string, left bool) {
	delete(n.seen, id)
	delete(n.silent, id)
	n.s.tracef("%s sees %s %s", n.id, id, map[bool]string{true: "leave", false: "fail"}[left])
	n.core.MemberDown(id, left)
	n.flush()
	if i := n.world.Rank(id); i >= 0 {
		n.shell.lost(i, id)
		if r := n.w.rankOf(id); r >= 0 {
			n.w.peerLost(r, id)
		}
	}
}

// flush sends the rendezvous core's messages and handles its events.
func (n *node) flush() {
	rd := n.core.Ready()
	for _, m := range rd.Messages {
		m.From = n.id
		n.s.send(n.id, m.To, m)
	}
	for _, e := range rd.Events {
		n.s.tracef("%s: %s", n.id, e)
		switch e.Kind {
		case elastic.EventCommitted:
			n.s.check.committed(n.id, e.World)
			n.commit(e.World)
		case elastic.EventWaiting:
			n.lead.Waiting(e.Reason)
		case elastic.EventProposed:
			if e.World.Gen > n.s.check.proposed.Gen {
				n.s.check.proposed = e.World
			}
			if e.World.Contains(n.id) {
				n.w.abort(fmt.Sprintf("generation %d proposed", e.World.Gen))
			}
		}
	}
}

// receive handles a message from the network.
func (n *node) receive(e envelope) {
	if n.done {
		return
	}
	switch b := e.body.(type) {
	case elastic.Message:
		n.core.Step(b)
		n.flush()
	case collMsg:
		n.w.collective(b)
	case callMsg:
		n.w.call(e.from, b)
	case replyMsg:
		n.shell.reply(b)
	case runStep:
		n.w.runStep(e.from, b)
	case stepDone:
		n.shell.stepDone(b)
	case stateMsg:
		n.w.state(b)
	case saveMsg:
		n.w.save(e.from, b)
	case savedMsg:
		n.shell.saved(b)
	}
	n.shell.apply()
}

// commit takes a world the rendezvous committed: the step in flight is
// abandoned, the leader core takes the world.
func (n *node) commit(w elastic.World) {
	n.w.abort(fmt.Sprintf("generation %d committed", w.Gen))
	n.shell.stop()
	n.world = w
	lead := w.Rank(n.id) == 0
	n.lead.Commit(w, lead, n.s.latestCheckpoint())
	n.shell.apply()
}

// finish ends the node's part in the job (the agent's exit).
func (n *node) finish(err error) {
	if n.done {
		return
	}
	n.done, n.err = true, err
	n.s.tracef("%s finishes: %v", n.id, err)
	n.s.check.finished(n, err)
}
