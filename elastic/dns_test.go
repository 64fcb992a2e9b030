package elastic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testDNS is a DNS server in this process that answers A queries for one
// name with a list of addresses the test changes, as a Kubernetes headless
// service lists its pods.
type testDNS struct {
	name string
	srv  *dns.Server
	mu   sync.Mutex
	ips  []string
	done chan struct{}
}

func newTestDNS(t *testing.T, name string) *testDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &testDNS{name: dns.Fqdn(name), done: make(chan struct{})}
	started := make(chan struct{})
	d.srv = &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: dns.HandlerFunc(d.serve)}
	go func() {
		defer close(d.done)
		d.srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		d.srv.Shutdown()
		<-d.done
	})
	return d
}

func (d *testDNS) set(ips ...string) {
	d.mu.Lock()
	d.ips = ips
	d.mu.Unlock()
}

func (d *testDNS) serve(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	d.mu.Lock()
	ips := append([]string(nil), d.ips...)
	d.mu.Unlock()
	for _, qq := range q.Question {
		if !strings.EqualFold(qq.Name, d.name) {
			m.Rcode = dns.RcodeNameError
			continue
		}
		if qq.Qtype != dns.TypeA {
			continue // no AAAA records: an empty answer
		}
		for _, ip := range ips {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: d.name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(ip)})
		}
	}
	w.WriteMsg(m)
}

// resolver asks only this server.
func (d *testDNS) resolver() *net.Resolver {
	addr := d.srv.PacketConn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", addr)
	}}
}

// freeLoopbackPort is a port free on 127.0.0.2, 127.0.0.3 and 127.0.0.4
// (TCP and UDP) when it was picked.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for _, h := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			a := net.JoinHostPort(h, fmt.Sprint(port))
			l, err := net.Listen("tcp", a)
			if err != nil {
				ok = false
				break
			}
			l.Close()
			u, err := net.ListenPacket("udp", a)
			if err != nil {
				ok = false
				break
			}
			u.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on 127.0.0.2-4")
	return 0
}

// TestNodesJoinDNS: every node gets the same --join dns:NAME:PORT, as the
// pods of a StatefulSet behind a headless service do. The first node finds
// only itself and starts the cluster; the next ones find it among the
// name's addresses and join; a node added to the records later joins
// too. A name that resolves to nothing is retried until JoinTimeout, then
// Start fails naming the entry.
func TestNodesJoinDNS(t *testing.T) {
	c := newCluster(t)
	d := newTestDNS(t, "troupe.test.svc.cluster.local")
	port := freeLoopbackPort(t)
	join := fmt.Sprintf("dns:troupe.test.svc.cluster.local:%d", port)
	at := func(host string) func(*Config) {
		return func(cfg *Config) {
			cfg.BindAddr = net.JoinHostPort(host, fmt.Sprint(port))
			cfg.Join, cfg.Resolver = []string{join}, d.resolver()
		}
	}
	d.set("127.0.0.2")
	a := c.mustStart("a", at("127.0.0.2"))
	d.set("127.0.0.2", "127.0.0.3")
	b := c.mustStart("b", at("127.0.0.3"))
	drain(b)
	waitWorld(t, a, "a b", hasNames("a b"))
	d.set("127.0.0.2", "127.0.0.3", "127.0.0.4")
	n3 := c.mustStart("c", at("127.0.0.4"))
	drain(n3)
	waitWorld(t, a, "a b c", hasNames("a b c"))

	d.set()
	t0 := time.Now()
	_, err := c.start("lonely", func(cfg *Config) {
		at("127.0.0.5")(cfg)
		cfg.BindAddr = "127.0.0.5:0"
		cfg.JoinTimeout = time.Second
	})
	if !errors.Is(err, ErrJoin) || !strings.Contains(err.Error(), "no address to join") || !strings.Contains(err.Error(), join+": ") {
		t.Fatalf("a name without records: %v, want ErrJoin naming %s", err, join)
	}
	if waited := time.Since(t0); waited < time.Second {
		t.Fatalf("gave up after %v, before JoinTimeout", waited)
	}
}

func TestDNSJoinEntries(t *testing.T) {
	for in, ok := range map[string]bool{
		"dns:troupe.default.svc.cluster.local:7101": true,
		"dns:troupe:1":     true,
		"dns::7101":        false,
		"dns:troupe":       false,
		"dns:troupe:0":     false,
		"dns:troupe:x":     false,
		"dns:a:b:7101":     false,
		"dns:troupe:7101/": false,
	} {
		cfg := DefaultConfig()
		cfg.Join = []string{in}
		err := cfg.Validate()
		if (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", in, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "dns:NAME:PORT") {
			t.Errorf("%q: %v does not say the form", in, err)
		}
	}
}
