package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/troupe-ml/troupe/internal/pki"
)

// SystemConfig configures a node's actor system.
type SystemConfig struct {
	// Remote serves protoactor remote (gRPC) on Host:Port so that actors in
	// other processes can reach this system's actors. Without it the system
	// is local: actors talk by pointer within the process only.
	Remote bool
	// Host is the address to listen on and advertise. Default 127.0.0.1.
	Host string
	// Port is the gRPC port; 0 picks a free one (see System.Address).
	Port int
	// MaxMessageBytes raises gRPC's message limit (4 MiB by default) on the
	// server and the client side. protoactor packs many messages into one
	// gRPC message, and a batch over the limit is lost without an error, so
	// the endpoint writer's batch is derived from it (see MaxActorMessageBytes).
	// Default 64 MiB.
	MaxMessageBytes int
	// MaxActorMessageBytes is the largest message this system's actors send
	// remotely (a chunk of the "actor" transport plus its envelope). The
	// endpoint writer batches at most MaxMessageBytes/MaxActorMessageBytes
	// messages. Default 1 MiB + 4 KiB.
	MaxActorMessageBytes int
	// TLS, when set, serves and dials protoactor remote over mutually
	// authenticated TLS 1.3 with this node's identity: a peer whose
	// certificate the cluster CA did not sign is refused and logged (Warn),
	// and its messages never reach an actor. nil: plaintext gRPC.
	TLS *pki.Identity
	// Logger receives protoactor's logs (its Info, Warn and Error at Debug
	// level, see zapSlog). Default: a no-op logger.
	Logger *zap.Logger
}

// DefaultSystemConfig is a local system.
func DefaultSystemConfig() SystemConfig {
	return SystemConfig{
		Host:                 "127.0.0.1",
		MaxMessageBytes:      64 << 20,
		MaxActorMessageBytes: 1<<20 + 4<<10,
	}
}

// Validate fills zero fields with defaults and rejects the rest that is
// out of range.
func (c *SystemConfig) Validate() error {
	d := DefaultSystemConfig()
	if c.Host == "" {
		c.Host = d.Host
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("%w: Port %d", ErrBadConfig, c.Port)
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.MaxActorMessageBytes == 0 {
		c.MaxActorMessageBytes = d.MaxActorMessageBytes
	}
	if c.MaxMessageBytes < 4<<20 || c.MaxActorMessageBytes <= 0 || c.MaxActorMessageBytes > c.MaxMessageBytes {
		return fmt.Errorf("%w: MaxMessageBytes %d (want ≥ 4 MiB) and MaxActorMessageBytes %d (want ≤ MaxMessageBytes)",
			ErrBadConfig, c.MaxMessageBytes, c.MaxActorMessageBytes)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// System is one node's protoactor actor system, local or remote.
type System struct {
	cfg    SystemConfig
	actors *actor.ActorSystem
	remote *remote.Remote
	logger *zap.Logger

	mu     sync.Mutex
	closed bool
	// localWorlds numbers the local worlds started, to name their actors.
	localWorlds atomic.Int64
}

// NewSystem starts an actor system; with cfg.Remote it also serves
// protoactor remote over gRPC.
func NewSystem(cfg SystemConfig) (*System, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger.With(zap.String("lib", "protoactor"))
	as := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(&zapSlog{z: logger})
	}))
	s := &System{cfg: cfg, actors: as, logger: cfg.Logger}
	if !cfg.Remote {
		return s, nil
	}
	port := cfg.Port
	if port == 0 {
		// protoactor panics when it cannot listen; find a free port first so
		// that a busy one is an error instead.
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, "0"))
		if err != nil {
			return nil, fmt.Errorf("actors: listen on %s: %w", cfg.Host, err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	} else if ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(port))); err != nil {
		return nil, fmt.Errorf("actors: listen on %s:%d: %w", cfg.Host, port, err)
	} else {
		ln.Close()
	}
	batch := max(1, cfg.MaxMessageBytes/cfg.MaxActorMessageBytes-1)
	n := cfg.MaxMessageBytes
	// Close stops the server, then the endpoint writers: once Stop
	// returns no handler may still be delivering a peer's message.
	serverOpts := []grpc.ServerOption{grpc.MaxRecvMsgSize(n), grpc.MaxSendMsgSize(n), grpc.WaitForHandlers(true)}
	dialCreds := insecure.NewCredentials()
	if cfg.TLS != nil {
		refused := func(peer string, err error) {
			cfg.Logger.Warn("actors: refused a peer", zap.String("peer", peer), zap.Error(err))
		}
		serverOpts = append(serverOpts, grpc.Creds(loggedCreds{credentials.NewTLS(cfg.TLS.Server(refused)), cfg.Logger}))
		dialCreds = loggedCreds{credentials.NewTLS(cfg.TLS.Client()), cfg.Logger}
	}
	rc := remote.Configure(cfg.Host, port,
		remote.WithServerOptions(serverOpts...),
		remote.WithDialOptions(
			grpc.WithTransportCredentials(dialCreds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(n), grpc.MaxCallSendMsgSize(n)),
			// A connection attempt whose SYN a cut link dropped would
			// wait for the kernel's retransmissions (1 s, then 3 s, …)
			// after the link heals: attempts are bounded and retried
			// soon instead, so a healed peer is reached within a second.
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: dialAttempt,
				Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
		),
		remote.WithEndpointWriterBatchSize(batch),
	)
	// One connection attempt: a peer that cannot be reached is reported
	// (EndpointTerminatedEvent) at once and the collectives abort, instead of
	// five attempts 2 s apart. Each failed attempt also leaves a gRPC client
	// connection behind in this protoactor version.
	rc.MaxRetryCount = 1
	s.remote = remote.NewRemote(as, rc)
	if err := startRemote(s.remote); err != nil {
		return nil, err
	}
	return s, nil
}

// loggedCreds logs failed TLS handshakes: a server the cluster CA did not
// sign, and on the server side those the certificate check did not log (a
// client that refused this node's certificate, or spoke no TLS); gRPC
// itself only tells its own logger.
type loggedCreds struct {
	credentials.TransportCredentials
	log *zap.Logger
}

func (c loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && !errors.Is(err, pki.ErrPeerRefused) {
		c.log.Warn("actors: TLS handshake failed", zap.String("peer", conn.RemoteAddr().String()), zap.Error(err))
	}
	return tc, info, err
}

func (c loggedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if errors.Is(err, pki.ErrPeerRefused) {
		c.log.Warn("actors: refused a peer", zap.String("peer", conn.RemoteAddr().String()), zap.Error(err))
	}
	return tc, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{c.TransportCredentials.Clone(), c.log}
}

// dialAttempt bounds one connection attempt to a peer's actor system.
const dialAttempt = 500 * time.Millisecond

// remoteStart serialises protoactor remote start-ups: each sets gRPC's
// global logger, which two systems starting at once in one process race on.
var remoteStart sync.Mutex

// startRemote turns protoactor's panics on start-up into an error.
func startRemote(r *remote.Remote) (err error) {
	remoteStart.Lock()
	defer remoteStart.Unlock()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("actors: starting protoactor remote: %v", p)
		}
	}()
	r.Start()
	return nil
}

// Actors is the protoactor actor system, for spawning actors.
func (s *System) Actors() *actor.ActorSystem { return s.actors }

// Root is the system's root context.
func (s *System) Root() *actor.RootContext { return s.actors.Root }

// Address is host:port of a remote system, "nonhost" for a local one.
func (s *System) Address() string { return s.actors.Address() }

// DropPeer forgets this system's connection to the system at address (a
// peer that membership found failing and that came back): the next
// message to it dials anew, and watchers of its actors learn that they
// terminated; messages still queued for the old connection are lost. A
// connection kept open through a partition (no reset crossed it) would
// deliver what was sent after the heal only when TCP's retransmission
// backoff lets it, seconds later; a fresh one delivers at once.
func (s *System) DropPeer(address string) {
	if s.remote == nil || address == "" || address == s.Address() {
		return
	}
	s.actors.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: address})
}

// TLS is the node identity the system's remote runs with; nil without TLS.
// The node's other channels (gossip streams, the data plane) use the same.
func (s *System) TLS() *pki.Identity { return s.cfg.TLS }

// IsRemote reports whether the system serves protoactor remote.
func (s *System) IsRemote() bool { return s.remote != nil }

// Logger is the logger the system was configured with.
func (s *System) Logger() *zap.Logger { return s.logger }

// Close stops protoactor remote and the actor system. Actors must be
// stopped first (their Close methods): nothing may send after Close.
//
// It does not use protoactor's "graceful" remote stop, which stops the
// endpoint manager (its connection map set to nil) while the receive
// goroutines of endpoint writers may still publish a peer's hang-up to it:
// a peer exiting at the same moment (every member of a finished elastic
// job does) then crashed this process with a nil dereference inside
// protoactor-go. Instead the gRPC server stops first, waiting for its
// handlers (no peer's message is delivered after that), then the endpoint
// writers and watchers (their supervisor), which closes every client
// connection; a hang-up they publish then finds the endpoint manager
// whole, and it is never stopped.
func (s *System) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.remote != nil {
		s.remote.Shutdown(false)
		supervisor := actor.NewPID(s.actors.Address(), "EndpointSupervisor")
		if err := s.actors.Root.StopFuture(supervisor).Wait(); err != nil {
			s.logger.Debug("stopping protoactor's endpoint writers", zap.Error(err))
		}
	}
	s.actors.Shutdown()
	return nil
}

// zapSlog sends protoactor's slog records to zap at Debug level: it reports
// routine connection events at Info and every peer that hangs up at Error,
// while the failures that matter reach troupe's own code (a Comm actor's
// PeerLost) and are reported there.
type zapSlog struct {
	z     *zap.Logger
	attrs []zap.Field
}

func (h *zapSlog) level(l slog.Level) zapcore.Level {
	if l >= slog.LevelInfo {
		return zapcore.DebugLevel
	}
	return zapcore.DebugLevel - 1
}

func (h *zapSlog) Enabled(_ context.Context, l slog.Level) bool {
	return h.z.Core().Enabled(h.level(l))
}

func (h *zapSlog) Handle(_ context.Context, r slog.Record) error {
	ce := h.z.Check(h.level(r.Level), r.Message)
	if ce == nil {
		return nil
	}
	fields := append([]zap.Field(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, zap.Any(a.Key, a.Value.Any()))
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *zapSlog) WithAttrs(as []slog.Attr) slog.Handler {
	n := &zapSlog{z: h.z, attrs: append([]zap.Field(nil), h.attrs...)}
	for _, a := range as {
		n.attrs = append(n.attrs, zap.Any(a.Key, a.Value.Any()))
	}
	return n
}

func (h *zapSlog) WithGroup(name string) slog.Handler {
	return &zapSlog{z: h.z.Named(name), attrs: h.attrs}
}
