package actors

import (
	"fmt"
	"strings"
)

// Reply is a message a group call collects: it names the peer that sent
// it (the index the request carried) and, when the request failed there,
// why.
type Reply interface {
	GetPeer() uint32
	Failed() error
}

// gather is the pure core of one group call: who was asked, who answered,
// and the first failure. It knows nothing of actors; the Group actor feeds
// it and sends what it says.
type gather struct {
	asked   []bool
	replies []any
	pending int
	err     error
	// answered counts the replies taken.
	answered int
}

// newGather starts a call that sent msgs[p] to peer p (nil: p is not
// asked).
func newGather(msgs []any) *gather {
	g := &gather{asked: make([]bool, len(msgs)), replies: make([]any, len(msgs))}
	for p, m := range msgs {
		if m != nil {
			g.asked[p] = true
			g.pending++
		}
	}
	return g
}

// done reports whether the call has its answer: every asked peer replied,
// or one failed.
func (g *gather) done() bool { return g.pending == 0 || g.err != nil }

// reply takes r. A reply from a peer that was not asked, or a second one,
// is ignored (a late answer to an abandoned call is the Group's business:
// it checks the call before it gets here).
func (g *gather) reply(r Reply, name func(p int) string) {
	p := int(r.GetPeer())
	if p >= len(g.asked) || !g.asked[p] || g.replies[p] != nil || g.done() {
		return
	}
	if err := r.Failed(); err != nil {
		g.err = fmt.Errorf("%s: %w", name(p), err)
		return
	}
	g.replies[p] = r
	g.pending--
	g.answered++
}

// first names the asked peer that answered first, once one did ("").
func (g *gather) first(name func(p int) string) string {
	for p, r := range g.replies {
		if r != nil {
			return name(p)
		}
	}
	return ""
}

// fail ends the call with err (a lost or silent peer, a cancelled call).
func (g *gather) fail(err error) {
	if !g.done() {
		g.err = err
	}
}

// silent lists the asked peers that have not answered.
func (g *gather) silent(name func(p int) string) string {
	var ps []string
	for p, asked := range g.asked {
		if asked && g.replies[p] == nil {
			ps = append(ps, name(p))
		}
	}
	return strings.Join(ps, ", ")
}
