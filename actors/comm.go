package actors

import (
	"fmt"
	"net"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/failure"
)

// Transport says how chunk bytes travel between Comm actors in different
// processes. Within one process they always pass by pointer.
type Transport string

const (
	// TransportTCP carries chunks on the framed TCP data plane between the
	// two Comm actors, and control messages through protoactor remote.
	TransportTCP Transport = "tcp"
	// TransportActor carries chunks as protobuf bytes through protoactor
	// remote itself: slower (several copies per chunk), kept for comparison.
	TransportActor Transport = "actor"
	// TransportShm is TransportTCP's data plane with the payloads in shared
	// memory (DataPlaneConfig.SharedMemory): every rank on one host, Linux.
	TransportShm Transport = "shm"
	// TransportAuto is the data plane through shared memory to the peers on
	// this host (same boot and network namespace) and over TCP to the
	// others; TCP only with TLS (whose point is the bytes on a network) or
	// off Linux.
	TransportAuto Transport = "auto"
)

// dataPlane reports whether t carries chunks on the framed data plane.
func (t Transport) dataPlane() bool {
	return t == TransportTCP || t == TransportShm || t == TransportAuto
}

// CommConfig configures the Comm actors of one world.
type CommConfig struct {
	// Collective is the collectives' configuration (sub-chunk size,
	// timeouts); every rank must use the same SubChunkBytes.
	Collective collective.Config
	// Transport between processes; default TransportAuto.
	Transport Transport
	// World names the world; peers of another world are refused. Default "troupe".
	World string
	// TickInterval is how often a Comm actor passes the time to its engine,
	// which checks timeouts. Default Collective.Timeout/10, clamped to
	// [1 ms, 100 ms].
	TickInterval time.Duration
	// HandshakeTimeout bounds StartRemote's wait for every peer's hello.
	// Default 30 s.
	HandshakeTimeout time.Duration
	// ActorWindow is the number of chunk messages a rank may have in flight
	// to one peer on TransportActor (protoactor's remote Send never blocks,
	// so flow control is ours). Default 8.
	ActorWindow int
	// DataPlane tunes TransportTCP and TransportShm. Its MaxFrameBytes (the receive buffers'
	// size) defaults to Collective.SubChunkBytes, and is raised to it if
	// smaller.
	DataPlane DataPlaneConfig
	// DataAddr is where the data plane listens; default the system's host,
	// any port.
	DataAddr string
	// Logger; default the system's.
	Logger *zap.Logger
	// HostID overrides the host identity this rank gives its peers (by
	// default the boot id and network namespace): ranks with the same one
	// share memory (TransportAuto) and make one host of a hierarchical
	// all-reduce. As NCCL_HOSTID, it describes a layout: several "hosts" on
	// one machine for benchmarks and tests (TCP between them), or one
	// machine split in two. Empty: the real one.
	HostID string
}

// hostName is the host this world's ranks compare to decide on shared
// memory.
func (c *CommConfig) hostName() string {
	if c.HostID != "" {
		return c.HostID
	}
	return hostID
}

// DefaultCommConfig returns the defaults described on each field.
func DefaultCommConfig() CommConfig {
	return CommConfig{
		Collective:       collective.DefaultConfig(),
		Transport:        TransportAuto,
		World:            "troupe",
		HandshakeTimeout: 30 * time.Second,
		ActorWindow:      8,
		DataPlane:        DataPlaneConfig{Window: 8},
	}
}

// Validate fills zero fields with defaults and rejects the rest that is
// out of range.
func (c *CommConfig) Validate() error {
	d := DefaultCommConfig()
	if err := c.Collective.Validate(); err != nil {
		return err
	}
	if c.Transport == "" {
		c.Transport = d.Transport
	}
	if !c.Transport.dataPlane() && c.Transport != TransportActor {
		return fmt.Errorf("%w: transport %q: want %q, %q, %q or %q", ErrBadConfig, c.Transport, TransportAuto, TransportTCP, TransportShm, TransportActor)
	}
	switch c.Transport {
	case TransportShm:
		c.DataPlane.SharedMemory = true
	case TransportAuto:
		c.DataPlane.SharedMemory = shmSupported && c.DataPlane.TLS == nil
	}
	if c.World == "" {
		c.World = d.World
	}
	if c.TickInterval == 0 {
		c.TickInterval = max(time.Millisecond, min(100*time.Millisecond, c.Collective.Timeout/10))
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.ActorWindow == 0 {
		c.ActorWindow = d.ActorWindow
	}
	if c.TickInterval < 0 || c.HandshakeTimeout < 0 || c.ActorWindow < 1 {
		return fmt.Errorf("%w: TickInterval %v, HandshakeTimeout %v, ActorWindow %d", ErrBadConfig, c.TickInterval, c.HandshakeTimeout, c.ActorWindow)
	}
	c.DataPlane.MaxFrameBytes = max(c.DataPlane.MaxFrameBytes, c.Collective.SubChunkBytes)
	if c.DataPlane.Logger == nil {
		c.DataPlane.Logger = c.Logger
	}
	if err := c.DataPlane.Validate(); err != nil {
		return err
	}
	return nil
}

// Messages between a Comm actor and its shell, its peers in the same
// process, and its data plane. They never leave the process.
type (
	// commInit gives a local Comm actor its peers, once all are spawned.
	commInit struct{ peers []*actor.PID }
	// localMsg is a collective message passed by pointer.
	localMsg struct{ m collective.Message }
	// dpFrame is a message that arrived on the data plane.
	dpFrame struct{ m collective.Message }
	// peerLost is a failure signal from the data plane.
	peerLost struct {
		rank int
		err  error
	}
	commTick  struct{}
	commClose struct{}
)

var theTick = &commTick{}

// commShell is the caller's side of a Comm actor: it posts requests into
// the actor's mailbox and knows whether the actor still takes them.
type commShell struct {
	root *actor.RootContext
	pid  *actor.PID
	mu   sync.RWMutex
	// closed: no more requests may be posted (the close message, or the
	// actor's end, is the last thing the mailbox gets from the shell).
	closed bool
	done   chan struct{} // closed when the actor has stopped
	// posted holds the requests in the mailbox: if the actor is stopped
	// from outside, protoactor drops them, and they are failed instead.
	pmu    sync.Mutex
	posted map[*collective.Request]struct{}
}

func (s *commShell) post(req *collective.Request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return collective.ErrClosed
	}
	s.pmu.Lock()
	if s.posted == nil {
		s.posted = map[*collective.Request]struct{}{}
	}
	s.posted[req] = struct{}{}
	s.pmu.Unlock()
	s.root.Send(s.pid, req)
	return nil
}

// take is called by the actor as a request reaches it.
func (s *commShell) take(req *collective.Request) {
	s.pmu.Lock()
	delete(s.posted, req)
	s.pmu.Unlock()
}

// close asks the actor to close (it waits, bounded, for its operations to
// be acknowledged) and returns once it stopped.
func (s *commShell) close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	if first {
		s.root.Send(s.pid, &commClose{})
	}
	<-s.done
	return nil
}

// markStopped is called by the actor as it stops: requests it never got
// fail with err.
func (s *commShell) markStopped(err error) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.pmu.Lock()
	for req := range s.posted {
		req.Fail(err)
	}
	s.posted = nil
	s.pmu.Unlock()
	close(s.done)
}

// commActor owns one rank's collective.Engine and is its Outbox.
type commActor struct {
	sys    *System
	cfg    CommConfig
	rank   int
	size   int
	self   *actor.PID
	shell  *commShell
	logger *zap.Logger

	peers  []*actor.PID // by world rank; peers[rank] is self
	local  []bool       // the peer lives in this actor system: pass by pointer
	engine *collective.Engine
	dp     *DataPlane

	// remote handshake
	remoteWorld bool
	heard       []bool
	nHeard      int
	// hosts names every rank's host as its hello said ("" unknown); read
	// by StartRemote once ready signalled success.
	hosts []string
	// connected holds the peer addresses protoactor has a live connection
	// to: an EndpointTerminatedEvent for an address never connected comes
	// from a first dial that failed while the peer was still starting, and
	// says nothing about the peer now.
	connected map[string]bool
	ready     chan error
	lastHello time.Time

	// TransportActor flow control
	credits  []int
	queued   [][]collective.Message
	consumed []int

	failed     error // a panic in the shell: every later request fails
	closing    bool
	closeStart time.Time
	stopping   bool
	stopTicks  chan struct{}
	sub        *eventstream.Subscription
}

var _ collective.Outbox = (*commActor)(nil)

// newCommActor builds rank's actor. local[r] says whether rank r lives in
// this process; remoteWorld whether some ranks live elsewhere.
func newCommActor(sys *System, cfg CommConfig, rank int, local []bool, remoteWorld bool, shell *commShell) (*commActor, error) {
	size := len(local)
	a := &commActor{sys: sys, cfg: cfg, rank: rank, size: size, shell: shell, logger: cfg.Logger.With(zap.Int("rank", rank)),
		local: local, remoteWorld: remoteWorld, heard: make([]bool, size), hosts: make([]string, size), ready: make(chan error, 1),
		credits: make([]int, size), queued: make([][]collective.Message, size), consumed: make([]int, size),
		stopTicks: make(chan struct{})}
	for i := range a.credits {
		a.credits[i] = cfg.ActorWindow
	}
	e, err := collective.NewEngine(cfg.Collective, rank, size, a)
	if err != nil {
		return nil, err
	}
	a.engine = e
	return a, nil
}

// Receive is the actor's mailbox handler: every input of the engine comes
// through here, one at a time.
func (a *commActor) Receive(ctx actor.Context) {
	defer a.recoverPanic(ctx)
	now := time.Now()
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.self = ctx.Self()
		a.startTicks()
	case *commInit:
		a.peers = msg.peers
		for r, p := range a.peers {
			if r != a.rank {
				ctx.Watch(p)
			}
		}
	case *collective.Request:
		a.shell.take(msg)
		if a.failed != nil {
			msg.Fail(a.failed)
			return
		}
		a.engine.Submit(now, msg)
	case *localMsg:
		a.engine.Deliver(now, msg.m)
	case *dpFrame:
		a.engine.Deliver(now, msg.m)
	case *actorspb.CollectiveMsg:
		m, err := fromWire(msg, a.size)
		if err != nil {
			a.logger.Warn("dropping a bad collective message", zap.Error(err))
			return
		}
		a.engine.Deliver(now, m)
		if m.Type == collective.MsgData {
			a.consume(ctx, m.From)
		}
	case *actorspb.CommCredit:
		if p := int(msg.From); p < a.size && p != a.rank {
			a.credits[p] += int(msg.Messages)
			a.drain(p)
		}
	case *actorspb.CommHello:
		a.onHello(ctx, msg)
	case *actor.Terminated:
		if r := a.rankOf(msg.Who); r >= 0 {
			a.lost(now, r, fmt.Errorf("its Comm actor terminated (%s)", msg.Why))
		}
	case *remote.EndpointConnectedEvent:
		a.connected[msg.Address] = true
	case *remote.EndpointTerminatedEvent:
		if !a.connected[msg.Address] {
			break
		}
		a.connected[msg.Address] = false
		for r, p := range a.peers {
			if r != a.rank && a.heard[r] && !a.local[r] && p.Address == msg.Address {
				a.lost(now, r, fmt.Errorf("endpoint %s terminated", msg.Address))
			}
		}
	case *peerLost:
		if a.heard[msg.rank] {
			a.lost(now, msg.rank, msg.err)
		}
	case *commTick:
		a.engine.Tick(now)
		a.helloAgain(ctx, now)
	case *commClose:
		if !a.closing {
			a.closing, a.closeStart = true, now
			a.engine.Close(now)
		}
	case *actor.Stopped:
		a.stopped()
		return
	}
	if a.closing && !a.stopping && (!a.engine.Busy() || now.Sub(a.closeStart) > a.cfg.Collective.AbortAckTimeout) {
		a.stopping = true
		ctx.Stop(ctx.Self())
	}
}

// recoverPanic turns a bug in the shell into failed operations instead of
// a restarted actor that forgot them.
func (a *commActor) recoverPanic(ctx actor.Context) {
	if p := recover(); p != nil {
		// Crashed, as every panic; the communicator is closed with it.
		a.failed = fmt.Errorf("%w (%w)", failure.Panicked(fmt.Sprintf("Comm actor of rank %d", a.rank), p), collective.ErrClosed)
		a.logger.Error("Comm actor panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		a.engine.Fail(time.Now(), a.failed)
	}
}

func (a *commActor) startTicks() {
	root, self, every, stop := a.sys.Root(), a.self, a.cfg.TickInterval, a.stopTicks
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				root.Send(self, theTick)
			}
		}
	}()
}

func (a *commActor) stopped() {
	close(a.stopTicks)
	if a.sub != nil {
		a.sys.Actors().EventStream.Unsubscribe(a.sub)
	}
	if a.dp != nil {
		a.dp.Close()
	}
	err := a.failed
	if err == nil {
		err = collective.ErrClosed
	}
	a.engine.Fail(time.Now(), err)
	a.signalReady(fmt.Errorf("%w: Comm actor of rank %d stopped", ErrHandshake, a.rank))
	a.shell.markStopped(err)
}

// lost passes a failure signal to the engine.
func (a *commActor) lost(now time.Time, r int, err error) {
	a.engine.PeerLost(now, r, err)
	a.queued[r] = nil
}

func (a *commActor) rankOf(pid *actor.PID) int {
	for r, p := range a.peers {
		if r != a.rank && p.Equal(pid) {
			return r
		}
	}
	return -1
}

// Send is the engine's Outbox: route m by where its destination lives.
func (a *commActor) Send(m collective.Message) {
	to := m.To
	if to < 0 || to >= a.size || to == a.rank || a.peers == nil {
		return
	}
	root := a.sys.Root()
	switch {
	case a.local[to]:
		root.Send(a.peers[to], &localMsg{m: m})
	case a.cfg.Transport.dataPlane() && (m.Type == collective.MsgData || m.Type == collective.MsgDone):
		a.dp.Send(m)
	case a.cfg.Transport == TransportActor && m.Type == collective.MsgData:
		a.queued[to] = append(a.queued[to], m)
		a.drain(to)
	default:
		root.Send(a.peers[to], toWire(m, false))
	}
}

// drain sends queued chunks to peer while it has credit. Each is encoded
// (copied) as it goes, so the queue holds no copies.
func (a *commActor) drain(peer int) {
	q := a.queued[peer]
	for len(q) > 0 && a.credits[peer] > 0 {
		a.credits[peer]--
		a.sys.Root().Send(a.peers[peer], toWire(q[0], true))
		q[0] = collective.Message{}
		q = q[1:]
	}
	if len(q) == 0 {
		q = nil
	}
	a.queued[peer] = q
}

// consume counts a chunk taken from peer and returns credit in batches of
// half the window: the peer never waits with a full window, since the
// other half is then in flight towards this rank.
func (a *commActor) consume(ctx actor.Context, peer int) {
	a.consumed[peer]++
	if a.consumed[peer] >= max(1, a.cfg.ActorWindow/2) {
		ctx.Send(a.peers[peer], &actorspb.CommCredit{From: uint32(a.rank), Messages: uint32(a.consumed[peer])})
		a.consumed[peer] = 0
	}
}

// Cancel is the engine's Outbox: forget what is queued for an aborted
// generation, and wait until the data plane reads none of its buffers.
func (a *commActor) Cancel(group uint32, gen uint64) {
	for p, q := range a.queued {
		a.queued[p] = slices.DeleteFunc(q, func(m collective.Message) bool { return m.Group == group && m.Gen <= gen })
	}
	if a.dp != nil {
		a.dp.Cancel(group, gen)
	}
}

// Place is the engine's collective.Placer: the data plane reads the
// operation's copied data straight into its buffer.
func (a *commActor) Place(group uint32, id collective.OpID, l collective.Landing) {
	if a.dp != nil {
		a.dp.Place(group, id, l)
	}
}

// Unplace: see Place.
func (a *commActor) Unplace(group uint32, id collective.OpID) {
	if a.dp != nil {
		a.dp.Unplace(group, id)
	}
}

// SharedPayloads is the engine's Outbox: peers in this process read our
// buffers in place, and so do peers on this host that map our registered
// memory.
func (a *commActor) SharedPayloads() bool {
	return !a.remoteWorld || slices.Contains(a.local, true) || a.cfg.Collective.RegisteredMemory
}

// StartLocal spawns size Comm actors in sys, one per rank, that pass chunks
// to each other by pointer, and returns their communicators (rank r at
// index r). Close every communicator to stop them.
func StartLocal(sys *System, size int, cfg CommConfig) ([]collective.Communicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if size < 1 {
		return nil, fmt.Errorf("%w: %d ranks", ErrBadConfig, size)
	}
	if cfg.Logger == nil {
		cfg.Logger = sys.Logger()
	}
	seq := sys.localWorlds.Add(1)
	pids := make([]*actor.PID, size)
	comms := make([]collective.Communicator, size)
	shells := make([]*commShell, size)
	for r := 0; r < size; r++ {
		shell := &commShell{root: sys.Root(), done: make(chan struct{})}
		local := make([]bool, size)
		for i := range local {
			local[i] = i != r
		}
		a, err := newCommActor(sys, cfg, r, local, false, shell)
		if err == nil {
			shell.pid, err = spawnComm(sys, a, localCommName(cfg.World, seq, r))
		}
		if err != nil {
			for _, s := range shells[:r] {
				s.close()
			}
			return nil, err
		}
		pids[r], shells[r] = shell.pid, shell
		comms[r] = collective.NewCommunicator(r, size, shell.post, shell.close, a.engine)
	}
	for _, pid := range pids {
		sys.Root().Send(pid, &commInit{peers: pids})
	}
	return comms, nil
}

// localCommName names rank's Comm actor in the seq-th local world started
// in a system.
func localCommName(world string, seq int64, rank int) string {
	return fmt.Sprintf("comm-%s-local%d-%d", world, seq, rank)
}

func spawnComm(sys *System, a *commActor, name string) (*actor.PID, error) {
	props := Props(func() actor.Actor { return a },
		// A Comm actor never restarts: its state is the operations in
		// flight; recoverPanic fails them instead.
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })))
	return sys.Root().SpawnNamed(props, name)
}

// RemoteWorld places the ranks of a world on actor systems, one rank per
// process.
type RemoteWorld struct {
	// Rank is this process's rank.
	Rank int
	// Addrs[r] is the protoactor remote address (host:port) of rank r's
	// system; Addrs[Rank] is this system's Address().
	Addrs []string
}

// commActorName is the Comm actor's name in its system, so that peers can
// address it knowing only the system's address.
func commActorName(world string, rank int) string { return fmt.Sprintf("comm-%s-%d", world, rank) }

// StartRemote spawns this process's Comm actor for world w, introduces it to
// every peer (protocol, world and transport must agree), and returns its
// communicator once all peers answered, or an ErrHandshake after
// cfg.HandshakeTimeout. sys must be remote.
func StartRemote(sys *System, w RemoteWorld, cfg CommConfig) (collective.Communicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	size := len(w.Addrs)
	switch {
	case !sys.IsRemote():
		return nil, fmt.Errorf("%w: StartRemote needs a remote actor system", ErrBadConfig)
	case w.Rank < 0 || w.Rank >= size:
		return nil, fmt.Errorf("%w: rank %d of %d", ErrBadConfig, w.Rank, size)
	case w.Addrs[w.Rank] != sys.Address():
		return nil, fmt.Errorf("%w: Addrs[%d] is %s, this system is %s", ErrBadConfig, w.Rank, w.Addrs[w.Rank], sys.Address())
	case cfg.Transport == TransportActor && cfg.Collective.SubChunkBytes+4<<10 > sys.cfg.MaxActorMessageBytes:
		return nil, fmt.Errorf("%w: SubChunkBytes %d does not fit the system's MaxActorMessageBytes %d", ErrBadConfig, cfg.Collective.SubChunkBytes, sys.cfg.MaxActorMessageBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = sys.Logger()
	}
	// same-host peers read registered memory where it lies (dataplane.go)
	cfg.Collective.RegisteredMemory = cfg.Transport.dataPlane() && cfg.DataPlane.SharedMemory
	shell := &commShell{root: sys.Root(), done: make(chan struct{})}
	local := make([]bool, size)
	peers := make([]*actor.PID, size)
	for r, addr := range w.Addrs {
		peers[r] = actor.NewPID(addr, commActorName(cfg.World, r))
		local[r] = r != w.Rank && addr == sys.Address()
	}
	a, err := newCommActor(sys, cfg, w.Rank, local, true, shell)
	if err != nil {
		return nil, err
	}
	a.peers = peers
	root, self := sys.Root(), peers[w.Rank]
	if cfg.Transport.dataPlane() {
		addr := cfg.DataAddr
		if addr == "" {
			addr = net.JoinHostPort(sys.cfg.Host, "0")
		}
		a.dp, err = ListenDataPlane(addr, cfg.World, w.Rank, size, cfg.DataPlane,
			func(m collective.Message) { root.Send(self, &dpFrame{m: m}) },
			func(r int, err error) { root.Send(self, &peerLost{rank: r, err: err}) })
		if err != nil {
			return nil, err
		}
	}
	a.connected = map[string]bool{}
	a.sub = sys.Actors().EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *remote.EndpointTerminatedEvent:
			root.Send(self, e)
		case *remote.EndpointConnectedEvent:
			root.Send(self, e)
		}
	})
	shell.pid, err = spawnComm(sys, a, commActorName(cfg.World, w.Rank))
	if err != nil {
		sys.Actors().EventStream.Unsubscribe(a.sub)
		if a.dp != nil {
			a.dp.Close()
		}
		return nil, fmt.Errorf("%w: spawning the Comm actor: %w", ErrBadConfig, err)
	}
	comm := collective.NewCommunicator(w.Rank, size, shell.post, shell.close, a.engine)
	if size == 1 {
		a.signalReady(nil)
	}
	sys.Root().Send(shell.pid, theTick) // says hello
	select {
	case err = <-a.ready:
	case <-time.After(cfg.HandshakeTimeout):
		err = fmt.Errorf("%w: no hello from some of the %d peers within %v", ErrHandshake, size-1, cfg.HandshakeTimeout)
	}
	if err != nil {
		shell.close()
		return nil, err
	}
	if a.dp != nil {
		// Every peer's hello came (ready said so, after the actor wrote
		// hosts): groups spanning hosts run large all-reduces
		// hierarchically, the steps inside a host through shared memory.
		a.hosts[w.Rank] = a.cfg.hostName()
		if comm, err = collective.OnHosts(comm, a.hosts); err != nil {
			shell.close()
			return nil, err
		}
	}
	return comm, nil
}

func (a *commActor) hello() *actorspb.CommHello {
	h := &actorspb.CommHello{Protocol: commProtocol, World: a.cfg.World, Rank: uint32(a.rank), Size: uint32(a.size), Transport: string(a.cfg.Transport)}
	if a.dp != nil {
		h.DataAddr, h.ShmAddr, h.Host = a.dp.Addr(), a.dp.ShmAddr(), a.cfg.hostName()
	}
	return h
}

// helloAgain (re)sends the hello to the peers not heard from yet: a peer's
// Comm actor may not exist yet when the first one arrives.
func (a *commActor) helloAgain(ctx actor.Context, now time.Time) {
	if !a.remoteWorld || a.nHeard == a.size-1 || now.Sub(a.lastHello) < 100*time.Millisecond {
		return
	}
	a.lastHello = now
	for r, p := range a.peers {
		if r != a.rank && !a.heard[r] {
			ctx.Send(p, a.hello())
		}
	}
}

func (a *commActor) onHello(ctx actor.Context, h *actorspb.CommHello) {
	r := int(h.Rank)
	var err error
	switch {
	case !a.remoteWorld:
		return
	case h.Protocol != commProtocol:
		err = fmt.Errorf("%w: rank %d speaks protocol %d, this rank %d", ErrHandshake, h.Rank, h.Protocol, commProtocol)
	case h.World != a.cfg.World || int(h.Size) != a.size || r < 0 || r >= a.size || r == a.rank:
		err = fmt.Errorf("%w: hello from rank %d of %d in world %q; this is rank %d of %d in %q", ErrHandshake, h.Rank, h.Size, h.World, a.rank, a.size, a.cfg.World)
	case Transport(h.Transport) != a.cfg.Transport:
		err = fmt.Errorf("%w: rank %d uses transport %q, this rank %q", ErrHandshake, r, h.Transport, a.cfg.Transport)
	case a.cfg.Transport.dataPlane() && h.DataAddr == "":
		err = fmt.Errorf("%w: rank %d has no data plane address", ErrHandshake, r)
	case a.cfg.Transport == TransportShm && (h.Host != a.cfg.hostName() || h.Host == "" || h.ShmAddr == ""):
		err = fmt.Errorf("%w: rank %d runs on another host (%q, this is %q): the shm transport needs every rank on one host", ErrHandshake, r, h.Host, a.cfg.hostName())
	}
	if err != nil {
		if !h.Reply && r >= 0 && r < a.size && r != a.rank && a.peers != nil {
			// Answer anyway, so that the peer sees the mismatch too and
			// says why, rather than only missing this rank's hello.
			reply := a.hello()
			reply.Reply = true
			ctx.Send(a.peers[r], reply)
		}
		a.signalReady(err)
		return
	}
	if !h.Reply {
		// Answer every plain hello, also from a peer heard before: our
		// earlier answer may have been dropped while protoactor's
		// connection to it was still being made, and the peer keeps
		// asking until it hears us.
		reply := a.hello()
		reply.Reply = true
		ctx.Send(a.peers[r], reply)
	}
	if a.heard[r] {
		return
	}
	a.heard[r] = true
	a.nHeard++
	a.hosts[r] = h.Host
	if a.dp != nil {
		addr := h.DataAddr
		if h.ShmAddr != "" && a.dp.ShmAddr() != "" && h.Host == a.cfg.hostName() && h.Host != "" {
			addr = h.ShmAddr // same host: through shared memory
		}
		a.dp.SetPeer(r, addr)
	}
	// Remote peers are not watched: a process's death shows as an
	// EndpointTerminatedEvent (and a reset data plane connection), and a
	// remote watch makes protoactor send Terminated across the wire when an
	// actor stops; if the peer's system is already gone, that send blocks a
	// protoactor endpoint writer in connection retries for about 10 s.
	if a.nHeard == a.size-1 {
		a.signalReady(nil)
	}
}

// signalReady ends StartRemote's wait; only the first outcome counts.
func (a *commActor) signalReady(err error) {
	select {
	case a.ready <- err:
	default:
	}
}
