package actors

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-ml/troupe/internal/pki"
	"github.com/troupe-ml/troupe/internal/wait"
)

// testIdentity issues a node certificate of ca.
func testIdentity(t testing.TB, ca *pki.CA, name string) *pki.Identity {
	t.Helper()
	id, err := ca.Identity(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func testCA(t testing.TB, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// tap is a TCP proxy that records every byte it forwards one way.
type tap struct {
	ln    net.Listener
	mu    sync.Mutex
	buf   bytes.Buffer
	conns []net.Conn
	wg    sync.WaitGroup
}

func newTap(t *testing.T, to string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tap{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
			go func() {
				defer p.wg.Done()
				io.Copy(io.MultiWriter(u, writerFunc(func(b []byte) { p.mu.Lock(); p.buf.Write(b); p.mu.Unlock() })), c)
				u.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *tap) seen() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.buf.Bytes())
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

// TestDataPlaneTLSCarriesFramesEncrypted: over TLS the frames arrive
// whole, and a wiretap between the ranks sees none of the payload, which
// it sees in the clear without TLS (the control that the tap works).
func TestDataPlaneTLSCarriesFramesEncrypted(t *testing.T) {
	ca := testCA(t, "cluster")
	payload := make([]float32, 4096)
	for i := range payload {
		payload[i] = 1234.5678 + float32(i)
	}
	needle := floatBytes(payload[100:116])
	for _, withTLS := range []bool{false, true} {
		cfg := DefaultDataPlaneConfig()
		cfg.Key = []byte("secret")
		txCfg, rxCfg := cfg, cfg
		if withTLS {
			txCfg.TLS, rxCfg.TLS = testIdentity(t, ca, "n0"), testIdentity(t, ca, "n1")
		}
		p := newPlanePair(t, txCfg, rxCfg, "w", "w")
		tp := newTap(t, p.rx.Addr())
		p.tx.SetPeer(1, tp.ln.Addr().String())
		for i := 0; i < 3; i++ {
			p.tx.Send(dataMsg(uint32(i), payload))
			m := p.recv(t)
			if m.Seq != uint32(i) || !slices.Equal(m.Payload, payload) {
				t.Fatalf("TLS %v: frame %d arrived as seq %d, %d values", withTLS, i, m.Seq, len(m.Payload))
			}
			m.Release()
		}
		seen := tp.seen()
		if got := bytes.Contains(seen, needle); got == withTLS {
			t.Fatalf("TLS %v: the wiretap saw the payload in %d bytes: %v", withTLS, len(seen), got)
		}
		if errs := p.lostErrs(); len(errs) > 0 {
			t.Fatalf("TLS %v: %v", withTLS, errs)
		}
	}
}

// TestDataPlaneTLSRefusesStrangers: a rank whose certificate another CA
// signed, or one without TLS, cannot connect either way; the refusal is
// an ErrDataPlane naming TLS for the dialer and a warning on the listener.
func TestDataPlaneTLSRefusesStrangers(t *testing.T) {
	ca, other := testCA(t, "cluster"), testCA(t, "intruder-ca")
	good := func(name string) DataPlaneConfig {
		c := DefaultDataPlaneConfig()
		c.TLS = testIdentity(t, ca, name)
		c.DialTimeout = 500 * time.Millisecond // a plaintext peer waits for the other to speak
		return c
	}
	rogue := good("rogue")
	rogue.TLS = testIdentity(t, other, "rogue")
	plain := DefaultDataPlaneConfig()
	plain.DialTimeout = 500 * time.Millisecond
	for name, c := range map[string]struct {
		tx, rx       DataPlaneConfig
		txErr, rxLog string
	}{
		// The rogue refuses the listener's certificate first; the listener
		// reads its alert, or a reset when the rogue closed with the
		// listener's last handshake bytes unread (seen once in a suite run).
		"rogue dials the cluster":   {tx: rogue, rx: good("n1"), txErr: `cluster CA "intruder-ca"`, rxLog: "TLS handshake failed"},
		"the cluster dials a rogue": {tx: good("n0"), rx: rogue, txErr: `issuer "intruder-ca"`},
		"plaintext dials TLS":       {tx: plain, rx: good("n1"), txErr: "handshake", rxLog: "TLS handshake failed"},
		"TLS dials plaintext":       {tx: good("n0"), rx: plain, txErr: "TLS"},
	} {
		t.Run(name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			c.rx.Logger = zap.New(core)
			p := newPlanePair(t, c.tx, c.rx, "w", "w")
			p.tx.Send(dataMsg(0, []float32{1}))
			wait.Until(10*time.Second, func() bool { return len(p.lostErrs()) > 0 })
			errs := p.lostErrs()
			if len(errs) == 0 || !errors.Is(errs[0], ErrDataPlane) || !strings.Contains(errs[0].Error(), c.txErr) {
				t.Fatalf("%v, want a refusal mentioning %q", errs, c.txErr)
			}
			select {
			case m := <-p.got:
				t.Fatalf("a stranger's frame arrived: %v", m)
			default:
			}
			if c.rxLog == "" {
				return
			}
			wait.Until(10*time.Second, func() bool { return logged(logs, c.rxLog) })
			if !logged(logs, c.rxLog) {
				t.Fatalf("the listener logged %v, want a warning mentioning %q", logs.All(), c.rxLog)
			}
		})
	}
}

func logged(logs *observer.ObservedLogs, s string) bool {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, s) {
			return true
		}
		for _, f := range e.Context {
			if f.Interface != nil {
				if err, ok := f.Interface.(error); ok && strings.Contains(err.Error(), s) {
					return true
				}
			}
			if strings.Contains(f.String, s) {
				return true
			}
		}
	}
	return false
}
