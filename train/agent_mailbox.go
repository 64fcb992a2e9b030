package train

import (
	"sync"
	"sync/atomic"

	"github.com/troupe-ml/troupe/elastic"
)

// nodeGate brackets the worker's steps with the membership's Hold and
// Release, so that a world changes only between steps. It refuses steps
// until the node has joined, and once it leaves.
type nodeGate struct {
	node    atomic.Pointer[elastic.Node]
	leaving atomic.Bool
}

func (g *nodeGate) Hold() bool {
	n := g.node.Load()
	return n != nil && !g.leaving.Load() && n.Hold()
}

func (g *nodeGate) Release() {
	if n := g.node.Load(); n != nil {
		n.Release()
	}
}

// mailbox queues what the worker actor tells its node, without bound, so
// that the actor never blocks on the node's loop.
type mailbox struct {
	mu   sync.Mutex
	q    []any
	wake chan struct{} // size 1: "something was queued"
}

func newMailbox() *mailbox { return &mailbox{wake: make(chan struct{}, 1)} }

func (m *mailbox) put(v any) {
	m.mu.Lock()
	m.q = append(m.q, v)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mailbox) ready() <-chan struct{} { return m.wake }

func (m *mailbox) take() []any {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q
	m.q = nil
	return q
}
