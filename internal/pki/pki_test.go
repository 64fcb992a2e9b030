package pki

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func issue(t *testing.T, ca *CA, name string) *Identity {
	t.Helper()
	cert, key, err := ca.Issue(name, []string{"10.0.0.1", "svc.local"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id, err := FromPEM(ca.CertPEM(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// handshake runs a TLS handshake between a client and a server over a
// pipe and returns both sides' errors and what each side refused.
func handshake(t *testing.T, client, server *Identity) (cerr, serr error, crefused, srefused []string) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var mu sync.Mutex
	rec := func(list *[]string) Refused {
		return func(peer string, err error) {
			mu.Lock()
			*list = append(*list, peer+": "+err.Error())
			mu.Unlock()
		}
	}
	cc := client.Client()
	cc.ServerName = "server"
	cs := tls.Client(a, cc)
	ss := tls.Server(b, server.Server(rec(&srefused)))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		serr = ss.Handshake()
		if serr != nil {
			b.Close()
		}
	}()
	cerr = cs.Handshake()
	if errors.Is(cerr, ErrPeerRefused) {
		crefused = append(crefused, "server: "+cerr.Error())
	}
	if cerr == nil {
		// TLS 1.3: the client finishes before the server has checked its
		// certificate; a read sees the server's verdict.
		cs.SetReadDeadline(time.Now().Add(5 * time.Second))
		go func() { ss.Write([]byte{1}) }()
		var one [1]byte
		if _, err := cs.Read(one[:]); err != nil {
			cerr = err
		}
	} else {
		a.Close()
	}
	wg.Wait()
	return
}

func TestMutualTLSSameCA(t *testing.T) {
	ca := newCA(t, "cluster")
	n1, n2 := issue(t, ca, "n1"), issue(t, ca, "n2")
	if n1.Name() != "n1" || n1.CAName() != "cluster" {
		t.Fatalf("names %q, %q", n1.Name(), n1.CAName())
	}
	cerr, serr, cr, sr := handshake(t, n1, n2)
	if cerr != nil || serr != nil || len(cr)+len(sr) > 0 {
		t.Fatalf("same CA: client %v, server %v, refused %q %q", cerr, serr, cr, sr)
	}
}

// A node whose certificate another CA signed is refused by the cluster's
// servers, and a cluster client refuses a server of another CA; both
// sides name the certificate and the CA.
func TestOtherCARefused(t *testing.T) {
	ca, other := newCA(t, "cluster"), newCA(t, "intruder-ca")
	good, rogue := issue(t, ca, "n1"), issue(t, other, "rogue")

	// A troupe node of another cluster refuses the server first (TLS 1.3:
	// the client checks the server's certificate before sending its own).
	cerr, serr, cr, _ := handshake(t, rogue, good)
	if !errors.Is(cerr, ErrPeerRefused) || serr == nil || len(cr) != 1 {
		t.Fatalf("rogue client: client %v, server %v, refused %q", cerr, serr, cr)
	}
	// A client that accepts any server but holds another CA's certificate
	// is refused by the server.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var sr []string
	ss := tls.Server(b, good.Server(func(p string, err error) { sr = append(sr, p+": "+err.Error()) }))
	done := make(chan error, 1)
	go func() { done <- ss.Handshake(); b.Close() }()
	cs := tls.Client(a, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: rogue.base().Certificates})
	cs.Handshake()
	cs.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	cs.Read(one[:])
	serr = <-done
	if !errors.Is(serr, ErrPeerRefused) || len(sr) != 1 || !strings.Contains(sr[0], `"rogue"`) || !strings.Contains(sr[0], `"intruder-ca"`) || !strings.Contains(sr[0], `cluster CA "cluster"`) {
		t.Fatalf("server error %v, refused %q", serr, sr)
	}

	cerr, _, cr, _ = handshake(t, good, rogue)
	if !errors.Is(cerr, ErrPeerRefused) || len(cr) != 1 || !strings.HasPrefix(cr[0], "server: ") {
		t.Fatalf("client error %v, refused %q", cerr, cr)
	}
}

// A client without any certificate is refused.
func TestNoClientCertificateRefused(t *testing.T) {
	ca := newCA(t, "cluster")
	good := issue(t, ca, "n1")
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var refused []string
	var mu sync.Mutex
	ss := tls.Server(b, good.Server(func(p string, err error) { mu.Lock(); refused = append(refused, err.Error()); mu.Unlock() }))
	done := make(chan error, 1)
	go func() { done <- ss.Handshake(); b.Close() }()
	cs := tls.Client(a, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	cs.Handshake()
	cs.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	cs.Read(one[:])
	if err := <-done; !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("server accepted a client without a certificate: %v", err)
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "no certificate") {
		t.Fatalf("refused %q", refused)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "cluster"), newCA(t, "other")
	cert, key, err := ca.Issue("n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, key2, _ := ca.Issue("n2", nil, time.Hour)
	otherCert, otherKey, _ := other.Issue("x", nil, time.Hour)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caf, certf, keyf := write("ca.pem", ca.CertPEM()), write("n1.pem", cert), write("n1-key.pem", key)
	if _, err := Load(caf, certf, keyf); err != nil {
		t.Fatalf("good files: %v", err)
	}
	cases := []struct {
		name, ca, cert, key, want string
	}{
		{"missing CA", filepath.Join(dir, "nope.pem"), certf, keyf, "nope.pem"},
		{"CA not PEM", write("junk.pem", []byte("junk")), certf, keyf, "no PEM CERTIFICATE"},
		{"key of another cert", caf, certf, write("n2-key.pem", key2), "private key does not match"},
		{"other CA's cert", caf, write("x.pem", otherCert), write("x-key.pem", otherKey), `issuer "other"`},
	}
	for _, c := range cases {
		_, err := Load(c.ca, c.cert, c.key)
		if !errors.Is(err, ErrBadIdentity) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrBadIdentity mentioning %q", c.name, err, c.want)
		}
	}
}

func TestExpiredCertificateRefused(t *testing.T) {
	ca := newCA(t, "cluster")
	cert, key, err := ca.Issue("old", nil, -2*time.Minute) // NotAfter before NotBefore+1m: already expired
	if err == nil {
		_, err = FromPEM(ca.CertPEM(), cert, key)
	}
	if !errors.Is(err, ErrBadIdentity) {
		t.Fatalf("expired certificate: %v", err)
	}
}

func TestLoadCARoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "cluster")
	kp, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	os.WriteFile(cf, ca.CertPEM(), 0o644)
	os.WriteFile(kf, kp, 0o600)
	back, err := LoadCA(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	// A certificate the reloaded CA issues is trusted by a node of the original.
	n1 := issue(t, ca, "n1")
	n2 := issue(t, back, "n2")
	if cerr, serr, _, _ := handshake(t, n2, n1); cerr != nil || serr != nil {
		t.Fatalf("reloaded CA's certificate: %v / %v", cerr, serr)
	}
	if _, err := LoadCA(cf, filepath.Join(dir, "missing")); !errors.Is(err, ErrBadIdentity) {
		t.Fatalf("missing CA key: %v", err)
	}
}

// FuzzFromPEM: any bytes as the CA, certificate and key files give an
// identity or an ErrBadIdentity, never a panic; an identity from fuzzed
// bytes still verifies its own certificate against its CA.
func FuzzFromPEM(f *testing.F) {
	ca, err := NewCA("fuzz", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	cert, key, err := ca.Issue("n1", []string{"10.0.0.1"}, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM(), cert, key)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), cert, key)
	f.Add(ca.CertPEM(), key, cert)
	f.Add([]byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, caPEM, certPEM, keyPEM []byte) {
		id, err := FromPEM(caPEM, certPEM, keyPEM)
		if err != nil {
			if !errors.Is(err, ErrBadIdentity) {
				t.Fatalf("error %v is not ErrBadIdentity", err)
			}
			return
		}
		if err := id.verify(id.cert.Leaf, nil); err != nil {
			t.Fatalf("an accepted identity does not verify: %v", err)
		}
	})
}
