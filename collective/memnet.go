package collective

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemNetwork is an in-memory network of ranks, each driven by its own
// goroutine that owns the rank's Engine, with hooks that drop, delay,
// duplicate, reorder and partition messages and kill ranks. Messages are
// copied on send, as a wire would. Tests run it under testing/synctest, so
// that delays and timeouts take no real time.
type MemNetwork struct {
	size int

	mu      sync.Mutex
	ranks   []*memRank
	faults  []*Fault
	side    []bool // Partition: messages between the two sides are lost
	cut     bool
	held    map[[2]int]*heldMsg // Reorder: one held message per link
	timers  map[*time.Timer]struct{}
	closed  bool
	started bool
	wg      sync.WaitGroup
	// hosts names each rank's host (SetHosts); nil: one host.
	hosts []string
}

// SetHosts places the ranks on hosts before Start (hosts[r] names rank r's
// host): the communicators then know them (OnHosts), as a data plane that
// learned its peers' hosts does, so that groups spanning several hosts run
// their large all-reduces hierarchically. The network itself treats every
// link alike.
func (n *MemNetwork) SetHosts(hosts []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started {
		return fmt.Errorf("%w: SetHosts after Start", ErrBadArgument)
	}
	if len(hosts) != n.size {
		return fmt.Errorf("%w: %d hosts for %d ranks", ErrBadArgument, len(hosts), n.size)
	}
	n.hosts = append([]string(nil), hosts...)
	return nil
}

// FaultAction is what a Fault does to the messages it matches.
type FaultAction uint8

const (
	// FaultDrop loses the message.
	FaultDrop FaultAction = iota + 1
	// FaultDelay delivers it after Fault.Delay.
	FaultDelay
	// FaultDuplicate delivers it twice.
	FaultDuplicate
	// FaultReorder holds it until the next message on the same link has
	// been delivered (or 1 ms passed), so the two arrive swapped.
	FaultReorder
)

// Fault is a rule applied to every message sent: the first fault whose
// Match returns true (nil matches everything) acts on the message.
type Fault struct {
	Action FaultAction
	Match  func(Message) bool
	// Delay is the delay of FaultDelay.
	Delay time.Duration
	// Count is how many messages the fault acts on; 0 means every one.
	Count int
	// hits counts the messages acted on (under MemNetwork.mu).
	hits int
}

// Hits is how many messages the fault has acted on so far.
func (f *Fault) Hits(n *MemNetwork) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return f.hits
}

type heldMsg struct {
	m     Message
	timer *time.Timer
}

type memRank struct {
	net     *MemNetwork
	rank    int
	engine  *Engine
	reqs    chan *Request
	signal  chan struct{} // size 1: "the inbox is not empty"
	inboxMu sync.Mutex
	inbox   []memEvent
	stop    chan struct{}
	stopped chan struct{}
	tick    time.Duration
	ackWait time.Duration
	closing time.Time // when Close began; zero before
	comm    Communicator
}

type memEvent struct {
	msg  Message
	lost int // ≥ 0: this world rank died
	err  error
}

// NewMemNetwork returns a network of size ranks; Start brings them up.
func NewMemNetwork(size int) *MemNetwork {
	return &MemNetwork{size: size, held: map[[2]int]*heldMsg{}, timers: map[*time.Timer]struct{}{}}
}

// Start brings up every rank with cfg and returns their world
// communicators, rank r at index r.
func (n *MemNetwork) Start(cfg Config) ([]Communicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.closed {
		return nil, fmt.Errorf("%w: network already started", ErrBadArgument)
	}
	n.started = true
	comms := make([]Communicator, n.size)
	tick := min(cfg.Timeout, cfg.AbortAckTimeout) / 10
	tick = max(time.Millisecond, min(tick, 100*time.Millisecond))
	for r := 0; r < n.size; r++ {
		mr := &memRank{net: n, rank: r, reqs: make(chan *Request), signal: make(chan struct{}, 1),
			stop: make(chan struct{}), stopped: make(chan struct{}), tick: tick, ackWait: cfg.AbortAckTimeout}
		e, err := NewEngine(cfg, r, n.size, memOutbox{mr})
		if err != nil {
			return nil, err
		}
		mr.engine = e
		mr.comm = NewCommunicator(r, n.size, mr.post, mr.close, e)
		if n.hosts != nil {
			if mr.comm, err = OnHosts(mr.comm, n.hosts); err != nil {
				return nil, err
			}
		}
		comms[r] = mr.comm
		n.ranks = append(n.ranks, mr)
	}
	for _, mr := range n.ranks {
		n.wg.Add(1)
		go mr.loop()
	}
	return comms, nil
}

// Inject adds a fault rule and returns it (see Fault.Hits).
func (n *MemNetwork) Inject(f Fault) *Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := &f
	n.faults = append(n.faults, p)
	return p
}

// ClearFaults removes every fault rule and heals any partition.
func (n *MemNetwork) ClearFaults() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = nil
	n.cut = false
}

// Partition cuts the network in two: messages between the ranks in side and
// the others are lost, silently (no failure signal: a lost link or host).
func (n *MemNetwork) Partition(side []int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.side = make([]bool, n.size)
	for _, r := range side {
		n.side[r] = true
	}
	n.cut = true
}

// Heal ends a partition.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = false
}

// Kill stops a rank as a crash would: its pending operations fail with
// ErrClosed and it sends nothing more. With notify the other ranks get a
// failure signal at once (a process died on a live host: its connections
// reset); without, they only notice its silence (a lost host).
func (n *MemNetwork) Kill(rank int, notify bool) {
	n.mu.Lock()
	if rank < 0 || rank >= len(n.ranks) {
		n.mu.Unlock()
		return
	}
	mr := n.ranks[rank]
	n.mu.Unlock()
	select {
	case <-mr.stop:
		return
	default:
	}
	close(mr.stop)
	<-mr.stopped
	if notify {
		for _, other := range n.ranks {
			if other.rank != rank {
				other.push(memEvent{lost: rank, err: fmt.Errorf("rank %d killed", rank)})
			}
		}
	}
}

// Close stops every rank and waits for their goroutines.
func (n *MemNetwork) Close() {
	n.mu.Lock()
	n.closed = true
	for t := range n.timers {
		t.Stop()
	}
	clear(n.timers)
	for _, h := range n.held {
		h.timer.Stop()
	}
	clear(n.held)
	ranks := n.ranks
	n.mu.Unlock()
	for _, mr := range ranks {
		select {
		case <-mr.stop:
		default:
			close(mr.stop)
		}
	}
	n.wg.Wait()
}

// send is the wire: called by the sending rank's goroutine.
func (n *MemNetwork) send(m Message) {
	m.Payload = slices.Clone(m.Payload)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || m.To < 0 || m.To >= len(n.ranks) {
		return
	}
	if n.cut && n.side[m.From] != n.side[m.To] {
		return
	}
	var f *Fault
	for _, x := range n.faults {
		if (x.Count == 0 || x.hits < x.Count) && (x.Match == nil || x.Match(m)) {
			f = x
			f.hits++
			break
		}
	}
	link := [2]int{m.From, m.To}
	switch {
	case f == nil:
	case f.Action == FaultDrop:
		return
	case f.Action == FaultDuplicate:
		n.ranks[m.To].push(memEvent{msg: m, lost: -1})
	case f.Action == FaultDelay:
		var t *time.Timer
		t = time.AfterFunc(f.Delay, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if _, ok := n.timers[t]; ok {
				delete(n.timers, t)
				n.ranks[m.To].push(memEvent{msg: m, lost: -1})
			}
		})
		n.timers[t] = struct{}{}
		return
	case f.Action == FaultReorder:
		if n.held[link] == nil {
			h := &heldMsg{m: m}
			h.timer = time.AfterFunc(time.Millisecond, func() {
				n.mu.Lock()
				defer n.mu.Unlock()
				if n.held[link] == h {
					delete(n.held, link)
					n.ranks[m.To].push(memEvent{msg: h.m, lost: -1})
				}
			})
			n.held[link] = h
			return
		}
	}
	n.ranks[m.To].push(memEvent{msg: m, lost: -1})
	if h := n.held[link]; h != nil {
		delete(n.held, link)
		h.timer.Stop()
		n.ranks[m.To].push(memEvent{msg: h.m, lost: -1})
	}
}

type memOutbox struct{ r *memRank }

func (o memOutbox) Send(m Message)        { o.r.net.send(m) }
func (o memOutbox) Cancel(uint32, uint64) {} // the wire holds copies
func (o memOutbox) SharedPayloads() bool  { return false }

var _ Outbox = memOutbox{}

func (r *memRank) push(ev memEvent) {
	r.inboxMu.Lock()
	r.inbox = append(r.inbox, ev)
	r.inboxMu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *memRank) post(req *Request) error {
	select {
	case r.reqs <- req:
		return nil
	case <-r.stopped:
		return ErrClosed
	}
}

func (r *memRank) close() error {
	if err := r.post(&Request{typ: reqClose}); err != nil {
		return nil // killed or closed already
	}
	<-r.stopped
	return nil
}

// loop is the rank's shell: the one goroutine that owns its Engine.
func (r *memRank) loop() {
	defer r.net.wg.Done()
	defer close(r.stopped)
	ticker := time.NewTicker(r.tick)
	defer ticker.Stop()
	defer func() { r.engine.Fail(time.Now(), ErrClosed) }()
	for {
		select {
		case <-r.stop:
			return
		case req := <-r.reqs:
			if req.typ == reqClose {
				r.closing = time.Now()
				r.engine.Close(r.closing)
			} else {
				r.engine.Submit(time.Now(), req)
			}
		case <-r.signal:
			r.inboxMu.Lock()
			evs := r.inbox
			r.inbox = nil
			r.inboxMu.Unlock()
			now := time.Now()
			for _, ev := range evs {
				if ev.lost >= 0 {
					r.engine.PeerLost(now, ev.lost, ev.err)
				} else {
					r.engine.Deliver(now, ev.msg)
				}
			}
		case now := <-ticker.C:
			r.engine.Tick(now)
		}
		if !r.closing.IsZero() && (!r.engine.Busy() || time.Since(r.closing) > r.ackWait) {
			return
		}
	}
}
