package elastic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/internal/pki"
)

// Option configures an optional collaborator of a Node.
type Option func(*options)

type options struct {
	logger *zap.Logger
	// Test hooks.
	wrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
	protocol      uint32
	drop          func(Message) bool
}

// WithLogger sets the node's logger (default: the actor system's).
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.logger = l } }

// WithDropIncoming makes the node drop every rendezvous message from a
// peer (and every push/pull state) for which drop returns true, as if the
// network lost it: fault-injection tests use it. drop runs on the
// membership actor and must not block.
func WithDropIncoming(drop func(Message) bool) Option { return func(o *options) { o.drop = drop } }

// Node is one elastic node: a memberlist member, the membership actor that
// owns the rendezvous core, and the channels the trainer reads. Its
// methods are safe for concurrent use.
type Node struct {
	cfg      Config
	self     Member
	sys      *actors.System
	logger   *zap.Logger
	protocol uint32
	meta     atomic.Pointer[[]byte]
	key      []byte // rendezvous MAC key, nil without a cluster key
	drop     func(Message) bool
	pid      *actor.PID
	ml       *memberlist.Memberlist
	gossip   string // host:port others reach this node's gossip at
	// addrs are the live members' gossip addresses (reconnector).
	addrs addrBook

	// mu orders Hold against the actor's steps: a proposal either arrives
	// before Hold (Hold returns false) or is deferred by it.
	mu      sync.Mutex
	held    bool
	pending bool // a proposal that involves this node waits for its commit

	world     atomic.Pointer[World]
	members   atomic.Pointer[[]Member]
	pushState atomic.Pointer[[]byte]
	acks      stamps // member ID → last probe answer
	failed    stamps // gossip address → when it was seen failing
	// hadPeers: some other member was live once (a node that never had
	// any waits for them, up to JoinTimeout at the start).
	hadPeers atomic.Bool

	worlds chan World // size 1: the newest committed world replaces an unread one
	events *eventQueue

	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup // ticker, reconnector
	actorDone chan struct{}
	pumpDone  chan struct{}
	// crashed is closed when the membership crashed (crashErr says how).
	crashed   chan struct{}
	crashOnce sync.Once
	crashErr  atomic.Pointer[error]
	closeOnce sync.Once
	closeErr  error
}

// Start creates the node's memberlist member and membership actor on sys,
// joins the cluster through cfg.Join and returns once it has joined (or
// started a cluster of its own). The node then takes part in every
// rendezvous; Close (or Leave) stops it. ctx bounds the join only.
func Start(ctx context.Context, cfg Config, sys *actors.System, opts ...Option) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{protocol: ProtocolVersion}
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = sys.Logger()
	}
	var rnd [2]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	start := time.Now().UnixNano()
	self := Member{
		ID:        fmt.Sprintf("%s-%s-%s", cfg.Name, strconv.FormatInt(start, 36), hex.EncodeToString(rnd[:])),
		Name:      cfg.Name,
		Start:     start,
		ActorAddr: sys.Address(),
		DataAddr:  cfg.DataAddr,
		Devices:   slices.Clone(cfg.Devices),
		Protocol:  o.protocol,
	}
	meta, err := encodeMeta(self, false)
	if err != nil {
		return nil, err
	}
	core, err := NewCore(CoreConfig{Self: self, MinNodes: cfg.MinNodes, MaxNodes: cfg.MaxNodes, Quorum: cfg.Quorum,
		SettleTicks: cfg.Timings.ticks(cfg.Timings.Settle), RetryTicks: max(1, cfg.Timings.ticks(cfg.Timings.Retry))})
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, self: self, sys: sys, protocol: o.protocol, key: macKey(cfg.Key), drop: o.drop,
		logger: o.logger.With(zap.String("node", cfg.Name), zap.String("member", self.ID)),
		worlds: make(chan World, 1), events: newEventQueue(), stop: make(chan struct{}), actorDone: make(chan struct{}), pumpDone: make(chan struct{}), crashed: make(chan struct{})}
	n.meta.Store(&meta)
	n.world.Store(&World{})
	n.members.Store(&[]Member{})
	switch {
	case cfg.Key == nil && sys.TLS() != nil:
		n.logger.Warn("elastic: no cluster key: gossip packets (UDP) are not encrypted; TLS covers the streams, and only nodes with a certificate of the cluster CA can join")
	case cfg.Key == nil:
		n.logger.Warn("elastic: no cluster key: gossip is not encrypted and anyone who reaches the gossip port can join")
	}

	a := &memberActor{n: n, core: core, addrs: map[string]string{self.ID: self.ActorAddr}, members: map[string]Member{}, refused: map[string]bool{}, badSenders: map[string]bool{}, leavers: map[string]bool{}}
	pid, err := sys.Root().SpawnNamed(actors.Props(func() actor.Actor { return a }), actorName(self.ID))
	if err != nil {
		return nil, fmt.Errorf("elastic: spawning the membership actor: %w", err)
	}
	n.pid = pid
	go n.pump()

	if err := n.startMemberlist(o); err != nil {
		n.stopActor()
		return nil, err
	}
	if err := n.join(ctx); err != nil {
		n.ml.Shutdown()
		n.stopActor()
		return nil, err
	}
	sys.Root().Send(pid, startMsg{})
	n.wg.Add(2)
	go n.ticker()
	go n.reconnector()
	return n, nil
}

func actorName(id string) string { return "elastic-" + id }

func (n *Node) startMemberlist(o options) error {
	t := n.cfg.Timings
	host, port, _ := splitHostPort(n.cfg.BindAddr)
	ip, err := resolveIP(host)
	if err != nil {
		return fmt.Errorf("%w: BindAddr %s: %v", ErrBadConfig, n.cfg.BindAddr, err)
	}
	mlLog := memberlistLogger(n.logger)
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{ip.String()}, BindPort: port, Logger: mlLog})
	if err != nil {
		return fmt.Errorf("elastic: gossip listener on %s: %w", n.cfg.BindAddr, err)
	}
	var tr memberlist.NodeAwareTransport = nt
	if id := n.sys.TLS(); id != nil {
		tr = newTLSTransport(nt, id, n.logger)
	}
	if o.wrapTransport != nil {
		tr = o.wrapTransport(tr)
	}
	c := memberlist.DefaultLocalConfig()
	c.Name = n.self.ID
	c.Transport = tr
	c.BindAddr, c.BindPort = ip.String(), nt.GetAutoBindPort()
	if n.cfg.AdvertiseAddr != "" {
		ah, ap, _ := splitHostPort(n.cfg.AdvertiseAddr)
		aip, err := resolveIP(ah)
		if err != nil {
			tr.Shutdown()
			return fmt.Errorf("%w: AdvertiseAddr %s: %v", ErrBadConfig, n.cfg.AdvertiseAddr, err)
		}
		c.AdvertiseAddr, c.AdvertisePort = aip.String(), ap
	}
	c.ProbeInterval, c.ProbeTimeout, c.GossipInterval = t.ProbeInterval, t.ProbeTimeout, t.GossipInterval
	c.SuspicionMult, c.PushPullInterval, c.TCPTimeout = t.SuspicionMult, t.PushPullInterval, t.TCPTimeout
	c.SecretKey = n.cfg.Key
	d := delegate{n}
	c.Delegate, c.Events, c.Alive, c.Merge, c.Ping = d, d, d, d, d
	c.Logger = mlLog
	ml, err := memberlist.Create(c)
	if err != nil {
		tr.Shutdown()
		return fmt.Errorf("elastic: starting memberlist: %w", err)
	}
	n.ml = ml
	ln := ml.LocalNode()
	n.gossip = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	return nil
}

func resolveIP(host string) (net.IP, error) {
	if host == "" {
		return net.IPv4zero, nil
	}
	a, err := net.ResolveIPAddr("ip", host)
	if err != nil {
		return nil, err
	}
	return a.IP, nil
}

// isSelf reports whether the join address a is this node's own.
func (n *Node) isSelf(a string) bool {
	host, port, err := splitHostPort(a)
	if err != nil {
		return false
	}
	_, myPort, _ := splitHostPort(n.gossip)
	if port != myPort {
		return false
	}
	ip, err := resolveIP(host)
	if err != nil {
		return false
	}
	myHost, _, _ := splitHostPort(n.gossip)
	my := net.ParseIP(myHost)
	bindHost, _, _ := splitHostPort(n.cfg.BindAddr)
	bind, _ := resolveIP(bindHost)
	// A loopback address of the other family (localhost as ::1 for a node
	// on 127.0.0.1) is this node too; 127.0.0.2 is not 127.0.0.1 (test
	// hosts on one machine, as a DNS name may list them).
	sameFamily := (ip.To4() == nil) == (my.To4() == nil)
	return ip.Equal(my) || ip.IsLoopback() && (bind.IsUnspecified() || my.IsLoopback() && !sameFamily)
}

// dnsLookupTimeout bounds one resolution of a dns: join entry.
const dnsLookupTimeout = 2 * time.Second

// seeds are the join addresses other than this node's own, with each
// dns:NAME:PORT entry resolved now to every address of NAME; seed says
// whether this node is one of its own join addresses. err says which
// entries resolved to nothing (the others are still returned).
func (n *Node) seeds(ctx context.Context) (others []string, seed bool, err error) {
	var errs []error
	add := func(a string) {
		if n.isSelf(a) {
			seed = true
		} else if !slices.Contains(others, a) {
			others = append(others, a)
		}
	}
	for _, a := range n.cfg.Join {
		name, port, ok := dnsJoin(a)
		if !ok {
			add(a)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, dnsLookupTimeout)
		ips, err := n.cfg.Resolver.LookupHost(lctx, name)
		cancel()
		if err == nil && len(ips) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		slices.Sort(ips)
		for _, ip := range ips {
			add(net.JoinHostPort(ip, port))
		}
	}
	return others, seed || len(n.cfg.Join) == 0, errors.Join(errs...)
}

// join contacts the seeds until one answers. A seed (a node listed in its
// own Join) starts alone when no other seed answers at once: the others
// join it when they start, and the reconnector keeps trying the seeds.
func (n *Node) join(ctx context.Context) error {
	deadline := time.Now().Add(n.cfg.JoinTimeout)
	var refusal error // the last attempt a seed refused by TLS
	tlsAnswered := false
	for {
		// A dns: entry that resolves to nothing yet (a pod not yet in
		// its service's records) is asked again until the deadline.
		others, seed, rerr := n.seeds(ctx)
		if len(others) == 0 && rerr == nil {
			n.logger.Info("elastic: starting a cluster", zap.String("gossip", n.gossip))
			return nil
		}
		var k int
		var err error
		if len(others) > 0 {
			k, err = n.ml.Join(others)
		}
		if k > 0 {
			n.logger.Info("elastic: joined", zap.String("gossip", n.gossip), zap.Int("contacted", k), zap.Strings("seeds", others))
			return nil
		}
		if rerr != nil {
			err = errors.Join(rerr, err)
		}
		// A seed starts the cluster when no other seed answers. One that
		// answered but whose certificate check failed (either way) says
		// this node is not of its cluster, and it may not start another;
		// nor may it when a seed accepted the connection but the handshake
		// did not finish in time (a loaded peer, or one that refuses
		// slowly): that seed is up. Both are remembered across attempts.
		tlsOn := n.sys.TLS() != nil && err != nil
		tlsRefused := tlsOn && (errors.Is(err, pki.ErrPeerRefused) || strings.Contains(err.Error(), pki.ErrPeerRefused.Error()) || strings.Contains(err.Error(), "tls:"))
		if tlsRefused {
			refusal = err
		}
		if tlsOn && strings.Contains(err.Error(), tlsDialFailed) {
			tlsAnswered = true
		}
		if seed && refusal == nil && !tlsAnswered && rerr == nil {
			n.logger.Info("elastic: no other seed answered; starting the cluster", zap.String("gossip", n.gossip), zap.Error(err))
			return nil
		}
		if time.Now().After(deadline) {
			if refusal != nil {
				return fmt.Errorf("%w: the nodes at %v did not admit this node within %v (TLS: they refused its certificate, or theirs is not signed by its CA; check --tls-ca and --tls-cert): %s",
					ErrJoin, others, n.cfg.JoinTimeout, oneLine(refusal))
			}
			if tlsAnswered {
				return fmt.Errorf("%w: the nodes at %v accepted connections but no TLS handshake with them completed within %v: %s",
					ErrJoin, others, n.cfg.JoinTimeout, oneLine(err))
			}
			if len(others) == 0 {
				return fmt.Errorf("%w: no address to join within %v: %s", ErrJoin, n.cfg.JoinTimeout, oneLine(err))
			}
			return fmt.Errorf("%w: no answer from %v within %v (a node without the cluster's key gets none: the others drop what they cannot decrypt): %s",
				ErrJoin, others, n.cfg.JoinTimeout, oneLine(err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v: %w", ErrJoin, others, ctx.Err())
		case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
		}
	}
}

// oneLine joins memberlist's multi-line error list into one line.
func oneLine(err error) string {
	if err == nil {
		return "no error"
	}
	f := strings.Fields(strings.ReplaceAll(err.Error(), "\n\t* ", "; "))
	return strings.ReplaceAll(strings.Join(f, " "), ":; ", ": ")
}

// ticker passes the time to the actor.
func (n *Node) ticker() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Timings.Tick)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.sys.Root().Send(n.pid, tickMsg{})
		}
	}
}

// stamps is a time per key, safe for concurrent use: when each member
// last answered one of this node's probes (keyed by member ID), and when
// members were seen failing (keyed by gossip address, for the
// reconnector).
type stamps struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (s *stamps) set(key string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[key] = t
}

// take returns key's time (zero when none) and forgets it.
func (s *stamps) take(key string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.at[key]
	delete(s.at, key)
	return t
}

// since lists the keys stamped after t, in order, and forgets the others.
func (s *stamps) since(t time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, at := range s.at {
		if at.After(t) {
			out = append(out, k)
		} else {
			delete(s.at, k)
		}
	}
	slices.Sort(out)
	return out
}

// reconnector tries, every Reconnect, the join addresses and the members
// that failed recently and are not live: memberlist stops gossiping to
// dead members, so without it two sides of a healed partition (or two
// seeds that started at the same time) would never merge. It runs
// outside memberlist's callbacks, so it may call Join. Each address gets
// a new attempt every tick while fewer than maxJoins of its attempts are
// still in flight: an attempt whose SYN a cut link dropped waits for the
// kernel's retransmission (a second), and a fresh one after the heal
// gets through at once. Every attempt ends within TCPTimeout, and the
// reconnector waits for them before it returns.
func (n *Node) reconnector() {
	defer n.wg.Done()
	const maxJoins = 4
	var joins sync.WaitGroup
	defer joins.Wait()
	var mu sync.Mutex
	inflight := map[string]int{}
	t := time.NewTicker(n.cfg.Timings.Reconnect)
	defer t.Stop()
	// ctx ends a DNS resolution in flight when the node stops.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	seeds, _, _ := n.seeds(ctx)
	resolved := time.Now()
	var gone goneTracker
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		// dns: entries follow their records (pods come and go), asked at
		// most once a second.
		if n.cfg.hasDNSJoin() && time.Since(resolved) >= time.Second {
			if s, _, err := n.seeds(ctx); err == nil || len(s) > 0 {
				seeds = s
			}
			resolved = time.Now()
		}
		members := n.addrs.snapshot()
		live := map[string]bool{}
		others := 0
		for name, addr := range members {
			live[addr] = true
			if name != n.self.ID {
				others++
			}
		}
		known := append(slices.Clone(seeds), n.failed.since(time.Now().Add(-n.cfg.Timings.ReconnectTimeout))...)
		alone := others == 0 && n.hadPeers.Load() && !soleMember(n.world.Load(), n.self.ID)
		var dials map[string]dialResult
		if alone {
			dials = dialAll(known, n.cfg.Timings.TCPTimeout)
		}
		if now := time.Now(); gone.observe(now, alone, dials, n.cfg.Timings.Gone) {
			n.logger.Error("elastic: every other node is gone", zap.Strings("refused", known), zap.Duration("for", now.Sub(gone.since)))
			n.crash(fmt.Errorf("%w: this node is alone and every address it knows (%s) has refused connections for %v: the job ended without this node (it was cut off until the others finished), or every other node stopped",
				ErrGone, strings.Join(known, ", "), now.Sub(gone.since).Round(100*time.Millisecond)))
			return
		}
		var try []string
		for _, a := range known {
			if !live[a] && !slices.Contains(try, a) && len(try) < 3 {
				try = append(try, a)
			}
		}
		for _, a := range try {
			mu.Lock()
			busy := inflight[a] >= maxJoins
			if !busy {
				inflight[a]++
			}
			mu.Unlock()
			if busy {
				continue
			}
			joins.Add(1)
			go func() {
				defer joins.Done()
				if k, err := n.ml.Join([]string{a}); k > 0 {
					n.logger.Info("elastic: reconnected", zap.String("gossip", a))
				} else {
					n.logger.Debug("elastic: reconnect failed", zap.String("gossip", a), zap.Error(err))
				}
				mu.Lock()
				inflight[a]--
				mu.Unlock()
			}()
		}
	}
}

// dialResult is what a connection attempt to a known address met.
type dialResult uint8

const (
	dialAccepted dialResult = iota + 1
	dialRefused             // a reset: nothing listens there
	dialSilent              // no answer in time: a cut link, or a lost SYN
)

// dialAll tries every address once, at once, each within timeout (at most a
// second).
func dialAll(addrs []string, timeout time.Duration) map[string]dialResult {
	out := make(map[string]dialResult, len(addrs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := dialSilent
			c, err := net.DialTimeout("tcp", a, min(timeout, time.Second))
			switch {
			case err == nil:
				c.Close()
				r = dialAccepted
			case errors.Is(err, syscall.ECONNREFUSED):
				r = dialRefused
			}
			mu.Lock()
			out[a] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// soleMember reports whether w, the newest committed world a node knows,
// is that node (self) alone: then it trains by itself (a job that allows a
// world of one, whose other nodes left), and seeing no peer is no sign
// that it was left behind.
func soleMember(w *World, self string) bool {
	return w != nil && len(w.Members) == 1 && w.Members[0].ID == self
}

// goneTracker decides when a node left alone gives up (Timings.Gone): for
// Gone in a row nothing it dialled accepted, and every address it knows
// refused a connection within the last Gone. A dial that gets no answer
// neither starts nor breaks the streak: a node cut off by a partition hears
// no refusal and keeps waiting for the heal, while a node whose peers
// exited while its link loses packets (a lost SYN or reset looks like
// silence) still sees them refuse most of the time and gives up. (Before,
// one silent dial restarted the streak, and such a node waited for ever.)
type goneTracker struct {
	since   time.Time // start of the streak; zero: none
	refused map[string]time.Time
}

// observe takes one tick: alone (the node had peers and sees none) and its
// dials. It reports whether the node is gone.
func (g *goneTracker) observe(now time.Time, alone bool, dials map[string]dialResult, gone time.Duration) bool {
	accepted := false
	for _, r := range dials {
		accepted = accepted || r == dialAccepted
	}
	if !alone || accepted || len(dials) == 0 {
		g.since, g.refused = time.Time{}, nil
		return false
	}
	if g.refused == nil {
		g.refused = map[string]time.Time{}
	}
	for a, r := range dials {
		if r == dialRefused {
			g.refused[a] = now
			if g.since.IsZero() {
				g.since = now
			}
		}
	}
	if g.since.IsZero() || now.Sub(g.since) < gone {
		return false
	}
	for a := range dials {
		if t, ok := g.refused[a]; !ok || now.Sub(t) > gone {
			return false
		}
	}
	return true
}

// Self is this node's member record.
func (n *Node) Self() Member { return n.self.clone() }

// GossipAddr is the host:port this node gossips on (with BindAddr port 0,
// the port picked), for other nodes' Join lists.
func (n *Node) GossipAddr() string { return n.gossip }

// World is the newest committed world this node knows (Gen 0: none yet).
// The node may not be a member of it (standby, waiting).
func (n *Node) World() World { return n.world.Load().clone() }

// Members lists the live members this node sees (itself included), in
// order; refused nodes are not members.
func (n *Node) Members() []Member {
	ms := *n.members.Load()
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = m.clone()
	}
	return out
}

// Worlds delivers each committed world this node learns, newest last. It
// holds one world: a newer one replaces a world not yet read, so a slow
// reader always gets the newest. Closed by Close.
func (n *Node) Worlds() <-chan World { return n.worlds }

// Events delivers every transition this node sees (members joining,
// leaving, failing, refused; proposals, commits, waiting), in order, for
// logs and metrics. Events queue without bound until read; there are a
// handful per transition. Closed by Close.
func (n *Node) Events() <-chan Event { return n.events.out }

// Hold marks the start of a training step: until Release, this node
// defers acknowledging a new world, so worlds change at step boundaries.
// It returns false, and holds nothing, when a new world that involves this
// node is already being agreed: do not start the step; wait for Worlds.
// (After a failure the trainer aborts the step on its own failure signal
// and calls Release at once.)
func (n *Node) Hold() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending {
		return false
	}
	n.held = true
	return true
}

// Release marks a step boundary (the step completed or was aborted): a
// deferred acknowledgement goes out.
func (n *Node) Release() {
	n.mu.Lock()
	n.held = false
	n.mu.Unlock()
	n.sys.Root().Send(n.pid, releaseMsg{})
}

// Request asks the leader for a new generation although membership did
// not change (e.g. a collective failed between live members).
func (n *Node) Request(reason string) { n.sys.Root().Send(n.pid, &requestMsg{reason: reason}) }

// Leave announces that this node leaves and closes it. The others form a
// world without it at once (within 0.1–0.2 s with FastTimings) and name
// the reason "left", not "failed". Until that world commits, this node
// still answers as an acceptor of its world (its answer may be what the
// quorum needs: a leave never costs the quorum, and several members may
// leave at once); Leave waits up to timeout for it, then for each of the
// two announcements (the metadata flag, then memberlist's leave) to go
// out. This node stops proposing worlds first.
func (n *Node) Leave(timeout time.Duration) error {
	n.sys.Root().Send(n.pid, leaveMsg{})
	meta, err := encodeMeta(n.self, true)
	if err == nil {
		n.meta.Store(&meta)
		n.sendLeaveNotices()
		err = n.ml.UpdateNode(timeout)
		n.awaitWorldWithout(timeout)
	}
	n.stopBackground() // the reconnector must not join again
	if err == nil {
		// The "leaving" metadata travels by gossip, the leave itself by
		// its own broadcast: give the metadata a few gossip rounds to reach
		// the others first, so that they record a leave, not a failure.
		time.Sleep(min(timeout, 4*n.cfg.Timings.GossipInterval))
	}
	if lerr := n.ml.Leave(timeout); err == nil {
		err = lerr
	}
	if cerr := n.Close(); err == nil {
		err = cerr
	}
	return err
}

// awaitWorldWithout waits, up to timeout, until this node has committed a
// world without itself. A node in no world, or with no other member, has
// nothing to wait for.
func (n *Node) awaitWorldWithout(timeout time.Duration) {
	t := time.NewTicker(n.cfg.Timings.Tick)
	defer t.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w := n.world.Load()
		if ms := n.members.Load(); w.Gen == 0 || !w.Contains(n.self.ID) || ms == nil || len(*ms) <= 1 {
			return
		}
		select {
		case <-t.C:
		case <-deadline.C:
			n.logger.Warn("elastic: leaving before a world without this node committed", zap.Duration("waited", timeout), zap.Uint64("generation", w.Gen))
			return
		case <-n.crashed:
			return
		}
	}
}

// sendLeaveNotices tells every other live member directly, over
// memberlist's TCP stream, that this node leaves, and waits for the sends
// (each bounded by Config.TCPTimeout). A member it cannot reach learns of
// the leave from the metadata or memberlist's broadcast instead.
func (n *Node) sendLeaveNotices() {
	msg := encodeLeaveNotice(n.self.ID)
	var wg sync.WaitGroup
	for _, m := range n.ml.Members() {
		if m.Name == n.self.ID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.ml.SendReliable(m, msg); err != nil {
				n.logger.Debug("elastic: leave notice not delivered", zap.String("to", m.Name), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

// Failed is closed when the node's membership can no longer be trusted
// (its actor panicked): its owner must Close it, and exit with Err.
func (n *Node) Failed() <-chan struct{} { return n.crashed }

// Err is why Failed closed (nil while it is open).
func (n *Node) Err() error {
	if p := n.crashErr.Load(); p != nil {
		return *p
	}
	return nil
}

// crash records err and closes Failed (once).
func (n *Node) crash(err error) {
	n.crashOnce.Do(func() {
		n.crashErr.Store(&err)
		close(n.crashed)
	})
}

// Close stops the node without a goodbye (the others detect its failure)
// and waits for its goroutines: memberlist, the membership actor, the
// ticker, the reconnector and the events pump. Worlds and Events close.
// Close nodes before their actor system.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.stopBackground()
		n.closeErr = n.ml.Shutdown()
		if err := n.stopActor(); err != nil && n.closeErr == nil {
			n.closeErr = err
		}
	})
	return n.closeErr
}

// stopBackground stops the ticker and the reconnector and waits for them.
func (n *Node) stopBackground() {
	n.stopOnce.Do(func() { close(n.stop) })
	n.wg.Wait()
}

// stopActor stops the membership actor and closes the trainer's channels.
// An actor that does not stop (its system was shut down first) keeps the
// channels open, since it might still write to them.
func (n *Node) stopActor() error {
	n.sys.Root().Stop(n.pid)
	select {
	case <-n.actorDone:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%w: the membership actor did not stop within 5 s (was the actor system closed first?)", ErrClosed)
	}
	close(n.worlds)
	n.events.close()
	<-n.pumpDone
	return nil
}

// publishWorld hands a committed world to the trainer's channel, replacing
// one not yet read. Only the actor calls it.
func (n *Node) publishWorld(w World) {
	n.world.Store(&w)
	for {
		select {
		case n.worlds <- w:
			return
		default:
		}
		select {
		case <-n.worlds:
		default:
		}
	}
}

// publishState seals the core's push/pull state for LocalState.
func (n *Node) publishState(m Message) {
	env, err := seal(n.key, n.protocol, n.self.ActorAddr, m)
	if err != nil {
		return
	}
	b, err := proto.Marshal(env)
	if err != nil {
		return
	}
	n.pushState.Store(&b)
}

// eventQueue is an unbounded queue drained into an unbuffered channel by
// the pump goroutine, so that the actor never blocks on a slow reader.
type eventQueue struct {
	mu     sync.Mutex
	q      []Event
	wake   chan struct{} // size 1: "something was queued"
	out    chan Event
	done   chan struct{}
	closed bool
}

func newEventQueue() *eventQueue {
	return &eventQueue{wake: make(chan struct{}, 1), out: make(chan Event), done: make(chan struct{})}
}

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.q = append(q.q, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

// pump moves queued events to the channel until the queue closes.
func (n *Node) pump() {
	defer close(n.pumpDone)
	q := n.events
	defer close(q.out)
	for {
		q.mu.Lock()
		batch := q.q
		q.q = nil
		q.mu.Unlock()
		for _, e := range batch {
			select {
			case q.out <- e:
			case <-q.done:
				return
			}
		}
		select {
		case <-q.wake:
		case <-q.done:
			return
		}
	}
}
