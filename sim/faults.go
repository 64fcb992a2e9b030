package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/elastic"
)

// Fault kinds a schedule draws (besides the messages' drop, duplication
// and delay, drawn per message in send).
const (
	faultCrash     = iota // kill -9, the node restarts as a new incarnation 1–4 s later
	faultHang             // SIGSTOP for 0.3–3 s, then SIGCONT
	faultPartition        // cut a minority of the nodes off for 1–5 s
	faultJoin             // a new node joins
	faultLeave            // a node leaves gracefully
	faultTorn             // the next checkpoint write tears (see member.save)
	nFaultKinds
)

// scheduleFault draws the time of the next node or network fault: a
// Poisson process of Config.Faults per virtual second.
func (s *sim) scheduleFault() {
	if s.cfg.Faults <= 0 {
		return
	}
	d := time.Duration(-math.Log(1-s.rng.Float64()) / s.cfg.Faults * float64(time.Second))
	s.clk.after(d, func() {
		if s.ended || s.quiet() {
			return
		}
		s.inject(s.rng.IntN(nFaultKinds))
		s.scheduleFault()
	})
}

// quiet reports whether the faults have stopped: for the second half of
// Config.Bound, so that the job must recover and end (the liveness
// check) however harsh the schedule was.
func (s *sim) quiet() bool { return s.clk.now >= s.cfg.Bound/2 }

// healthy lists the live nodes that are neither hung nor cut off.
func (s *sim) healthy() []*node {
	var out []*node
	for _, n := range s.live() {
		if !n.hung && !n.leaving && s.side[n.name] == 0 {
			out = append(out, n)
		}
	}
	return out
}

// spare reports whether k more healthy nodes can be taken away and a
// strict majority of the newest world still stays healthy: faults beyond
// that leave the job without a quorum, waiting (by design) for nodes that
// never come back, which tells nothing.
func (s *sim) spare(k int) bool {
	if s.check.latest().Gen == 0 {
		// Before the first world, a node lost while the world forms may
		// be in it: wait for it.
		return k == 0
	}
	// The newest world committed, and the newest proposed (it may commit).
	for _, w := range []elastic.World{s.check.latest(), s.check.proposed} {
		h := 0
		for _, n := range s.healthy() {
			if w.Contains(n.id) {
				h++
			}
		}
		if w.Gen > 0 && 2*(h-k) <= w.Size() {
			return false
		}
	}
	return true
}

// inject applies one fault of kind k, when the job can take it.
func (s *sim) inject(k int) {
	healthy := s.healthy()
	// victim draws the healthy node a crash, hang or leave takes, or
	// none when the job cannot spare one.
	victim := func() *node {
		if len(healthy) == 0 || !s.spare(1) {
			return nil
		}
		return healthy[s.rng.IntN(len(healthy))]
	}
	switch k {
	case faultCrash:
		n := victim()
		if n == nil {
			return
		}
		s.faults++
		s.tracef("FAULT crash %s", n.id)
		s.crash(n)
	case faultHang:
		n := victim()
		if n == nil {
			return
		}
		s.faults++
		s.tracef("FAULT hang %s", n.id)
		n.hung = true
		s.clk.after(300*time.Millisecond+time.Duration(s.rng.IntN(2700))*time.Millisecond, func() { s.resume(n) })
	case faultPartition:
		// Partitions wait for the first world: before it, each side would
		// form its own (the rendezvous' documented limit).
		if s.check.latest().Gen == 0 || slices.ContainsFunc(s.order, func(id string) bool { return s.side[s.nodes[id].name] != 0 }) {
			return
		}
		k := 1 + s.rng.IntN(max(1, (len(healthy)-1)/2))
		if len(healthy) < 2 || !s.spare(k) {
			return
		}
		var cut []string
		for _, i := range s.rng.Perm(len(healthy))[:k] {
			s.side[healthy[i].name] = 1
			cut = append(cut, healthy[i].name)
		}
		slices.Sort(cut)
		s.faults++
		s.tracef("FAULT partition %v | rest", cut)
		s.clk.after(time.Second+time.Duration(s.rng.IntN(4000))*time.Millisecond, func() {
			s.tracef("heal")
			clear(s.side)
		})
	case faultJoin:
		if len(s.live()) >= s.cfg.Nodes+2 {
			return
		}
		s.nextName++
		name := fmt.Sprintf("n%d", s.nextName)
		s.faults++
		s.tracef("FAULT join %s", name)
		s.restart(name, 1)
	case faultTorn:
		if s.cfg.CkptEvery > 0 {
			s.tearNext = true
		}
	case faultLeave:
		// Leaves need no guard of the quorum: a leaver answers as an
		// acceptor until a world without it committed. One healthy node
		// stays to finish the job.
		if len(healthy) < 2 {
			return
		}
		n := healthy[s.rng.IntN(len(healthy))]
		s.faults++
		s.tracef("FAULT leave %s", n.id)
		n.leaving, n.leavingAt = true, s.clk.now
		n.core.Leave()
		n.flush()
		for _, o := range s.live() {
			if o != n && !o.hung && s.reach(o.id, n.id) && o.seen[n.id] {
				o.heardLeaving(n)
			}
		}
	}
}

// crash kills n (kill -9); it restarts as a new incarnation 1–4 s later.
func (s *sim) crash(n *node) {
	n.up = false
	s.clk.after(time.Second+time.Duration(s.rng.IntN(3000))*time.Millisecond, func() { s.restart(n.name, n.inc+1) })
}

// restart starts an incarnation of name, again a second later while it
// reaches no live node.
func (s *sim) restart(name string, inc int) {
	if s.ended {
		return
	}
	if !s.startNode(name, inc) {
		s.clk.after(time.Second, func() { s.restart(name, inc) })
	}
}

// resume ends a node's hang: what arrived meanwhile runs now, in order.
func (s *sim) resume(n *node) {
	n.hung = false
	if !n.up {
		return
	}
	s.tracef("%s resumes", n.id)
	held := n.held
	n.held = nil
	for _, fn := range held {
		if n.hung || !n.up {
			n.held = append(n.held, fn)
			continue
		}
		fn()
	}
}
