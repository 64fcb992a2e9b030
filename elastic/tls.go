package elastic

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/internal/pki"
)

// tlsTransport runs memberlist's streams (joins, push/pull state
// exchanges, fallback probes) over mutually authenticated TLS. A node
// without a certificate of the cluster CA cannot complete a join: every
// member it dials refuses it, and it learns no member to gossip with. The
// packets (UDP probes and gossip) stay as memberlist sends them, encrypted
// with the cluster key.
type tlsTransport struct {
	memberlist.NodeAwareTransport
	srv, cli *tls.Config
	log      *zap.Logger
	streams  chan net.Conn
	quit     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

var _ memberlist.NodeAwareTransport = (*tlsTransport)(nil)

func newTLSTransport(inner memberlist.NodeAwareTransport, id *pki.Identity, log *zap.Logger) *tlsTransport {
	refused := func(peer string, err error) {
		log.Warn("elastic: gossip refused a peer", zap.String("peer", peer), zap.Error(err))
	}
	t := &tlsTransport{NodeAwareTransport: inner, srv: id.Server(refused), cli: id.Client(), log: log,
		streams: make(chan net.Conn), quit: make(chan struct{})}
	t.wg.Add(1)
	go t.forward()
	return t
}

// forward hands each accepted stream to memberlist as the server end of a
// TLS connection; the handshake runs in memberlist's reader, under the
// deadline it sets.
func (t *tlsTransport) forward() {
	defer t.wg.Done()
	in := t.NodeAwareTransport.StreamCh()
	for {
		select {
		case c := <-in:
			select {
			case t.streams <- tls.Server(c, t.srv):
			case <-t.quit:
				c.Close()
				return
			}
		case <-t.quit:
			return
		}
	}
}

func (t *tlsTransport) StreamCh() <-chan net.Conn { return t.streams }

// tlsDialFailed begins the error of a TLS handshake this node started: the
// peer accepted the connection, so it is up. memberlist's Join keeps only
// its errors' text, which join reads.
const tlsDialFailed = "TLS with "

func (t *tlsTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *tlsTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	cfg := t.cli.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(a.Addr)
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		if errors.Is(err, pki.ErrPeerRefused) {
			t.log.Warn("elastic: gossip refused a peer", zap.String("peer", a.Addr), zap.Error(err))
		}
		c.Close()
		return nil, fmt.Errorf("%s%s: %w", tlsDialFailed, a.Addr, err)
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// Shutdown stops forwarding, then shuts the inner transport down while
// closing any stream it still hands over: memberlist's NetTransport accepts
// a connection and blocks sending it on its stream channel, and its
// Shutdown waits for that send, so a peer dialing in just after forward
// stopped would make it wait for ever (a rogue node refused by TLS hung on
// its way out once, its peers dialing it every 200 ms).
func (t *tlsTransport) Shutdown() error {
	t.once.Do(func() { close(t.quit) })
	t.wg.Wait()
	done := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		in := t.NodeAwareTransport.StreamCh()
		for {
			select {
			case c := <-in:
				c.Close()
			case <-done:
				return
			}
		}
	}()
	err := t.NodeAwareTransport.Shutdown()
	close(done)
	<-drained
	return err
}
