package actors

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// Props is actor.PropsFromProducer with the mailbox every troupe actor
// needs (gatedMailbox); every actor troupe spawns takes its props here.
func Props(producer actor.Producer, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(producer, append(opts, actor.WithMailbox(newGatedMailbox))...)
}

// gatedMailbox is protoactor's unbounded mailbox that holds what is posted
// before the actor is started. protoactor's spawner registers a process
// under its name before it gives the mailbox its dispatcher
// (RegisterHandlers), so a message that names the actor in that window —
// a remote peer's, such as the hello a Comm actor's peers send as soon as
// they start — schedules on a nil dispatcher and crashes the process. The
// held messages go in at Start, system messages first (the spawner's
// Started among them, so the actor starts before it sees any message), in
// the order they came; posts after Start go straight through.
type gatedMailbox struct {
	inner   actor.Mailbox
	started atomic.Bool
	mu      sync.Mutex
	system  []any
	user    []any
}

func newGatedMailbox() actor.Mailbox {
	return &gatedMailbox{inner: actor.Unbounded()()}
}

// PostUserMessage implements actor.Mailbox.
func (m *gatedMailbox) PostUserMessage(msg any) {
	if m.started.Load() || !m.hold(msg, false) {
		m.inner.PostUserMessage(msg)
	}
}

// PostSystemMessage implements actor.Mailbox.
func (m *gatedMailbox) PostSystemMessage(msg any) {
	if m.started.Load() || !m.hold(msg, true) {
		m.inner.PostSystemMessage(msg)
	}
}

// hold keeps msg until Start, unless Start has run (false).
func (m *gatedMailbox) hold(msg any, system bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started.Load() {
		return false
	}
	if system {
		m.system = append(m.system, msg)
	} else {
		m.user = append(m.user, msg)
	}
	return true
}

// RegisterHandlers implements actor.Mailbox.
func (m *gatedMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.inner.RegisterHandlers(invoker, dispatcher)
}

// Start implements actor.Mailbox: the held messages go in, then the gate
// opens (a post racing with it waits for the lock and comes after them).
func (m *gatedMailbox) Start() {
	m.mu.Lock()
	for _, msg := range m.system {
		m.inner.PostSystemMessage(msg)
	}
	for _, msg := range m.user {
		m.inner.PostUserMessage(msg)
	}
	m.system, m.user = nil, nil
	m.started.Store(true)
	m.mu.Unlock()
	m.inner.Start()
}

// UserMessageCount implements actor.Mailbox.
func (m *gatedMailbox) UserMessageCount() int {
	m.mu.Lock()
	n := len(m.user)
	m.mu.Unlock()
	return n + m.inner.UserMessageCount()
}
