package elastic

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Timings tune the failure detector (memberlist) and the rendezvous clock.
// Faster detection costs more gossip traffic and risks declaring a node
// dead that is only slow (a long GC pause, an overloaded host).
type Timings struct {
	// ProbeInterval: each node probes one other node this often.
	ProbeInterval time.Duration
	// ProbeTimeout: a probe unanswered this long is a failed probe; then
	// the node asks others to probe indirectly, and suspects the member.
	ProbeTimeout time.Duration
	// GossipInterval: how often gossip (suspicions, deaths, joins) goes out.
	GossipInterval time.Duration
	// SuspicionMult: a suspected member is declared dead after
	// SuspicionMult × max(1, log10(N)) × ProbeInterval unless it refutes.
	SuspicionMult int
	// PushPullInterval: full state exchange with one random node, which
	// also carries the rendezvous state, so a node that missed a commit
	// learns it within this time at worst.
	PushPullInterval time.Duration
	// TCPTimeout bounds memberlist's stream connections (joins, push/pull,
	// TCP probes).
	TCPTimeout time.Duration
	// Tick is the rendezvous clock.
	Tick time.Duration
	// Settle: the leader waits until no node joined for this long before
	// it proposes a world with newcomers (rounded up to ticks).
	Settle time.Duration
	// Retry: unanswered rendezvous messages are sent again after this long
	// (rounded up to ticks).
	Retry time.Duration
	// Reconnect: how often a node tries to reach its join addresses and
	// the members it saw fail, so that a healed partition merges again
	// (memberlist itself stops talking to dead members); the time from a
	// heal to the merge is at most about this.
	Reconnect time.Duration
	// ReconnectTimeout: members that failed longer ago are not tried again.
	ReconnectTimeout time.Duration
	// Gone: a node that had peers and is alone gives up (Failed, ErrGone)
	// once every address it knows has refused connections this long: no
	// process listens there any more, so the job ended without it (it
	// was cut off until the others finished) or every other node
	// stopped. Addresses that do not answer at all (a partition) keep it
	// waiting.
	Gone time.Duration
}

// FastTimings are the defaults, the loopback preset: memberlist's DefaultLocalConfig tuned as in
// DESIGN.md ("failure signals"): probe 200 ms, timeout 100 ms, gossip
// 50 ms, suspicion multiplier 3. A killed or hung member is declared dead
// in about a second (0.85–1.04 s measured on loopback), a graceful leave
// reaches the others in 0.1–0.2 s. For one host or a quiet LAN.
func FastTimings() Timings {
	return Timings{
		ProbeInterval:    200 * time.Millisecond,
		ProbeTimeout:     100 * time.Millisecond,
		GossipInterval:   50 * time.Millisecond,
		SuspicionMult:    3,
		PushPullInterval: 5 * time.Second,
		TCPTimeout:       time.Second,
		Tick:             50 * time.Millisecond,
		Settle:           200 * time.Millisecond,
		Retry:            500 * time.Millisecond,
		Reconnect:        250 * time.Millisecond,
		ReconnectTimeout: 10 * time.Minute,
		Gone:             5 * time.Second,
	}
}

// LANTimings are memberlist's DefaultLANConfig: detection in about 5 s,
// fewer false alarms on a busy network.
func LANTimings() Timings {
	return Timings{
		ProbeInterval:    time.Second,
		ProbeTimeout:     500 * time.Millisecond,
		GossipInterval:   200 * time.Millisecond,
		SuspicionMult:    4,
		PushPullInterval: 30 * time.Second,
		TCPTimeout:       10 * time.Second,
		Tick:             100 * time.Millisecond,
		Settle:           time.Second,
		Retry:            2 * time.Second,
		Reconnect:        5 * time.Second,
		ReconnectTimeout: time.Hour,
		Gone:             15 * time.Second,
	}
}

// WANTimings are memberlist's DefaultWANConfig, for nodes across regions.
func WANTimings() Timings {
	t := LANTimings()
	t.ProbeInterval, t.ProbeTimeout, t.GossipInterval = 5*time.Second, 3*time.Second, 500*time.Millisecond
	t.SuspicionMult, t.PushPullInterval, t.TCPTimeout = 6, 60*time.Second, 30*time.Second
	t.Settle, t.Retry, t.Reconnect, t.Gone = 3*time.Second, 5*time.Second, 15*time.Second, time.Minute
	return t
}

// ParseTimings reads a preset, named for the network it fits: loopback
// (FastTimings; "fast" is its earlier name), lan or wan.
func ParseTimings(s string) (Timings, error) {
	switch s {
	case "loopback", "fast", "":
		return FastTimings(), nil
	case "lan":
		return LANTimings(), nil
	case "wan":
		return WANTimings(), nil
	}
	return Timings{}, fmt.Errorf("%w: timings %q: want loopback, lan or wan", ErrBadConfig, s)
}

func (t *Timings) validate() error {
	d := FastTimings()
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&t.ProbeInterval, d.ProbeInterval}, {&t.ProbeTimeout, d.ProbeTimeout}, {&t.GossipInterval, d.GossipInterval},
		{&t.PushPullInterval, d.PushPullInterval}, {&t.TCPTimeout, d.TCPTimeout}, {&t.Tick, d.Tick}, {&t.Settle, d.Settle},
		{&t.Retry, d.Retry}, {&t.Reconnect, d.Reconnect}, {&t.ReconnectTimeout, d.ReconnectTimeout}, {&t.Gone, d.Gone}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 {
			return fmt.Errorf("%w: negative duration in Timings %+v", ErrBadConfig, *t)
		}
	}
	if t.SuspicionMult == 0 {
		t.SuspicionMult = d.SuspicionMult
	}
	if t.SuspicionMult < 1 || t.ProbeTimeout >= t.ProbeInterval {
		return fmt.Errorf("%w: SuspicionMult %d (want ≥ 1), ProbeTimeout %v (want < ProbeInterval %v)", ErrBadConfig, t.SuspicionMult, t.ProbeTimeout, t.ProbeInterval)
	}
	return nil
}

// ticks is d in ticks, rounded up.
func (t Timings) ticks(d time.Duration) int { return int((d + t.Tick - 1) / t.Tick) }

// Config configures one elastic node (troupe agent).
type Config struct {
	// Name is the stable node ID (--name): letters, digits, '.', '_', '-',
	// at most 64. Each process start adds a unique suffix for memberlist.
	Name string
	// BindAddr is the gossip address host:port, UDP and TCP (--listen).
	// Port 0 picks a free port (see Node.GossipAddr).
	BindAddr string
	// AdvertiseAddr is the gossip address others dial, if not BindAddr's
	// (NAT, 0.0.0.0 binds). Optional.
	AdvertiseAddr string
	// Join lists gossip addresses of nodes to join (--join): host:port, or
	// dns:NAME:PORT for every address NAME resolves to (A and AAAA
	// records; a Kubernetes headless service), at PORT, resolved again
	// while the node runs. Every node of a job should get the same list. Entries equal to this node's own
	// address are skipped; a node whose list holds only itself, or
	// nothing, starts a cluster.
	Join []string
	// JoinTimeout: Start keeps trying Join until one address answers, at
	// most this long, then fails with ErrJoin (a seed listed in Join
	// starts alone instead). Default 30 s.
	JoinTimeout time.Duration
	// DataAddr is this node's tensor data plane address, advertised to
	// the others. Optional.
	DataAddr string
	// Resolver resolves dns: entries of Join. Default net.DefaultResolver.
	Resolver *net.Resolver
	// Devices names the node's local devices, advertised to the others.
	Devices []string
	// MinNodes: no world forms with fewer members (--min-nodes). Default 1.
	// Before the first world, two groups of nodes that cannot reach each
	// other each form their own world if each has MinNodes: set it above
	// half of the nodes started together to rule that out.
	MinNodes int
	// MaxNodes: at most this many members; more wait as standby
	// (--max-nodes). 0: no limit.
	MaxNodes int
	// Quorum (--quorum majority|any). Default majority.
	Quorum Quorum
	// Key is the cluster key (ParseKey): 16, 24 or 32 bytes. It encrypts
	// gossip and authenticates rendezvous messages; a node without it
	// cannot join. nil runs without encryption (a warning is logged).
	Key []byte
	// Timings default to FastTimings.
	Timings Timings
}

// DefaultConfig is a node named "node" on 127.0.0.1, any port, that starts
// a cluster of its own, with FastTimings.
func DefaultConfig() Config {
	return Config{Name: "node", BindAddr: "127.0.0.1:0", JoinTimeout: 30 * time.Second, MinNodes: 1, Timings: FastTimings()}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Validate fills zero fields with defaults and rejects the rest that is
// out of range.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("%w: name %q: want 1..64 letters, digits, '.', '_' or '-'", ErrBadConfig, c.Name)
	}
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("%w: BindAddr: %v", ErrBadConfig, err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("%w: AdvertiseAddr: %v", ErrBadConfig, err)
		}
	}
	for _, j := range c.Join {
		if strings.HasPrefix(j, dnsPrefix) {
			if _, _, ok := dnsJoin(j); !ok {
				return fmt.Errorf("%w: Join: %q: want dns:NAME:PORT (a DNS name and a port in 1..65535)", ErrBadConfig, j)
			}
			continue
		}
		if _, _, err := splitHostPort(j); err != nil {
			return fmt.Errorf("%w: Join: %v", ErrBadConfig, err)
		}
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = d.JoinTimeout
	}
	if c.JoinTimeout < 0 {
		return fmt.Errorf("%w: JoinTimeout %v", ErrBadConfig, c.JoinTimeout)
	}
	if c.MinNodes == 0 {
		c.MinNodes = d.MinNodes
	}
	if c.Key != nil {
		if err := checkKeyLen(c.Key); err != nil {
			return err
		}
	}
	if len(c.DataAddr) > maxAddrLen {
		return fmt.Errorf("%w: DataAddr of %d bytes, at most %d", ErrBadConfig, len(c.DataAddr), maxAddrLen)
	}
	if err := checkMember(Member{ID: c.Name, Name: c.Name, ActorAddr: "x", DataAddr: c.DataAddr, Devices: c.Devices}); err != nil {
		return fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	cc := CoreConfig{Self: Member{ID: c.Name, Name: c.Name}, MinNodes: c.MinNodes, MaxNodes: c.MaxNodes, Quorum: c.Quorum, RetryTicks: 1}
	if err := cc.Validate(); err != nil {
		return err
	}
	return c.Timings.validate()
}

// splitHostPort reads host:port with a numeric port.
const dnsPrefix = "dns:"

// dnsJoin splits a dns:NAME:PORT join entry.
func dnsJoin(a string) (name, port string, ok bool) {
	rest, ok := strings.CutPrefix(a, dnsPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", "", false
	}
	name, port = rest[:i], rest[i+1:]
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || strings.ContainsAny(name, ":/ ") {
		return "", "", false
	}
	return name, port, true
}

func (c *Config) hasDNSJoin() bool {
	for _, j := range c.Join {
		if strings.HasPrefix(j, dnsPrefix) {
			return true
		}
	}
	return false
}

func splitHostPort(a string) (string, int, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("address %q: port %q is not a number in 0..65535", a, port)
	}
	return host, p, nil
}
