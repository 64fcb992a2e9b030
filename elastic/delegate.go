package elastic

import (
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate is memberlist's view of a Node. memberlist calls it from its
// own goroutines, some while holding its locks: every method only copies
// what it got and posts it to the membership actor, or reads a snapshot;
// none calls memberlist or waits for the actor.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.EventDelegate = delegate{}
	_ memberlist.AliveDelegate = delegate{}
	_ memberlist.MergeDelegate = delegate{}
	_ memberlist.PingDelegate  = delegate{}
)

// Messages from memberlist's goroutines to the membership actor.
type (
	mlEventKind uint8
	// mlEvent is a NotifyJoin/Leave/Update with a copy of the node.
	mlEvent struct {
		kind mlEventKind
		node memberlist.Node
	}
	// refusedMsg: memberlist refused a node on our word (bad metadata).
	refusedMsg struct {
		id, addr string
		err      error
	}
	// stateMsg is a peer's push/pull state (an Envelope's bytes).
	stateMsg struct{ buf []byte }
	// leaveNoticeMsg: member id told us directly that it leaves.
	leaveNoticeMsg struct{ id string }
)

const (
	mlJoin mlEventKind = iota
	mlLeave
	mlUpdate
)

func copyNode(n *memberlist.Node) memberlist.Node {
	c := *n
	c.Addr = append([]byte(nil), n.Addr...)
	c.Meta = append([]byte(nil), n.Meta...)
	return c
}

func (d delegate) post(msg any) { d.n.sys.Root().Send(d.n.pid, msg) }

// NodeMeta is this node's metadata (encoded at Start, again by Leave).
func (d delegate) NodeMeta(limit int) []byte {
	m := *d.n.meta.Load()
	if len(m) > limit {
		return nil // Start checked the size against memberlist.MetaMaxSize
	}
	return m
}

// NotifyMsg passes a leave notice (the only user message troupe sends
// through memberlist) to the actor; anything else is dropped.
func (d delegate) NotifyMsg(b []byte) {
	if id, err := decodeLeaveNotice(b); err == nil {
		d.post(&leaveNoticeMsg{id: id})
	}
}

// GetBroadcasts: none.
func (d delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState is the rendezvous state for push/pull: committed world and
// accepted value, sealed like a rendezvous message.
func (d delegate) LocalState(bool) []byte {
	if p := d.n.pushState.Load(); p != nil {
		return *p
	}
	return nil
}

// MergeRemoteState passes a peer's push/pull state to the actor.
func (d delegate) MergeRemoteState(buf []byte, _ bool) {
	if len(buf) > 0 {
		d.post(&stateMsg{buf: append([]byte(nil), buf...)})
	}
}

func (d delegate) NotifyJoin(n *memberlist.Node) {
	d.n.addrs.set(n.Name, n.Address())
	d.post(&mlEvent{kind: mlJoin, node: copyNode(n)})
}

func (d delegate) NotifyLeave(n *memberlist.Node) {
	d.n.addrs.drop(n.Name)
	d.post(&mlEvent{kind: mlLeave, node: copyNode(n)})
}

func (d delegate) NotifyUpdate(n *memberlist.Node) {
	d.n.addrs.set(n.Name, n.Address())
	d.post(&mlEvent{kind: mlUpdate, node: copyNode(n)})
}

// addrBook is the gossip address of every live member (this node too), as
// memberlist's join, update and leave events said: read by the
// reconnector. memberlist's Members returns its own nodes, which its packet
// handler updates in place, so reading their addresses outside its
// callbacks races with it (the race detector showed it).
type addrBook struct {
	mu sync.Mutex
	m  map[string]string
}

func (b *addrBook) set(name, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]string{}
	}
	b.m[name] = addr
}

func (b *addrBook) drop(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, name)
}

// snapshot returns the live members' addresses by name.
func (b *addrBook) snapshot() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m)
}

// NotifyAlive refuses a member whose metadata does not decode or that
// speaks another protocol: memberlist then never makes it a peer, and logs
// the refusal; the actor logs it too, once.
func (d delegate) NotifyAlive(peer *memberlist.Node) error {
	if peer.Name == d.n.self.ID {
		return nil
	}
	if _, _, err := decodeMeta(peer.Name, peer.Meta, d.n.protocol); err != nil {
		d.post(&refusedMsg{id: peer.Name, addr: peer.Address(), err: err})
		return err
	}
	return nil
}

// NotifyMerge cancels a join with a cluster that holds a member this node
// refuses, so that the joiner's Join fails with the reason.
func (d delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if p.Name == d.n.self.ID || p.State != memberlist.StateAlive && p.State != memberlist.StateSuspect {
			continue
		}
		if _, _, err := decodeMeta(p.Name, p.Meta, d.n.protocol); err != nil {
			d.post(&refusedMsg{id: p.Name, addr: p.Address(), err: err})
			return err
		}
	}
	return nil
}

// AckPayload: none.
func (d delegate) AckPayload() []byte { return nil }

// NotifyPingComplete records when a member last answered a probe, to
// report how long it had been silent when it is declared dead.
func (d delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.n.acks.set(other.Name, time.Now())
}
