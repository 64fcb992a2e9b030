// Package pki holds a cluster's certificates: a certificate authority that
// issues node certificates (troupe certs), and a node's identity (its CA,
// certificate and key) as the TLS configurations of its servers and
// clients, with mutual authentication.
//
// A peer is a member of the cluster when its certificate chains to the
// cluster CA and may be used both as a client and as a server; names and
// addresses are not checked, because nodes (pods) come and go on addresses
// no one knows when their certificates are made. This is the model of
// Consul's and CockroachDB's node certificates. Connections use TLS 1.3.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// ErrBadIdentity: a CA, certificate or key is missing, does not parse,
// does not match, has expired, or is not signed by the CA.
var ErrBadIdentity = errors.New("pki: bad identity")

// ErrPeerRefused: a peer presented no certificate, or one the cluster CA
// did not sign.
var ErrPeerRefused = errors.New("pki: peer refused")

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name, valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"troupe"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA written by CertPEM and KeyPEM.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certs, err := readCerts(certFile)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: CA key: %w", ErrBadIdentity, err)
	}
	key, err := parseKey(kb)
	if err != nil {
		return nil, fmt.Errorf("%w: CA key %s: %w", ErrBadIdentity, keyFile, err)
	}
	ca := &CA{Cert: certs[0], Key: key}
	if !ca.Cert.IsCA || !key.PublicKey.Equal(ca.Cert.PublicKey) {
		return nil, fmt.Errorf("%w: %s is not a CA certificate or %s is not its key", ErrBadIdentity, certFile, keyFile)
	}
	return ca, nil
}

// CertPEM is the CA certificate, PEM-encoded (what every node trusts).
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's private key, PEM-encoded (keep it off the nodes).
func (ca *CA) KeyPEM() ([]byte, error) {
	return keyPEM(ca.Key)
}

// Issue makes a node certificate named name for client and server use,
// valid for validity (at most until the CA expires). hosts are added as
// DNS names or IP addresses (informational: peers check the CA only).
// It returns the certificate and its private key, PEM-encoded.
func (ca *CA) Issue(name string, hosts []string, validity time.Duration) (certPEM, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"troupe"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	if tmpl.NotAfter.Before(tmpl.NotBefore) {
		return nil, nil, fmt.Errorf("%w: the CA %q expired on %s", ErrBadIdentity, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != name {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &k.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	key, err = keyPEM(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key, nil
}

// Identity issues a node certificate (as Issue) and returns it as the
// node's identity, for tests and for processes the caller starts itself.
func (ca *CA) Identity(name string, validity time.Duration) (*Identity, error) {
	cert, key, err := ca.Issue(name, nil, validity)
	if err != nil {
		return nil, err
	}
	return FromPEM(ca.CertPEM(), cert, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	var k any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q, want PRIVATE KEY", blk.Type)
	}
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key, want ECDSA", k)
	}
	return ek, nil
}

func readCerts(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadIdentity, err)
	}
	certs, err := parseCerts(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadIdentity, file, err)
	}
	return certs, nil
}

func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return certs, nil
}

// Identity is a node's membership of a cluster: the CA it trusts and the
// certificate it presents. Safe for concurrent use.
type Identity struct {
	roots *x509.CertPool
	ca    *x509.Certificate
	cert  tls.Certificate
}

// Load reads a node's identity from PEM files: the cluster CA's
// certificate, the node's certificate and its private key. It fails when a
// file is missing or does not parse, when the key is not the certificate's,
// or when the certificate is not valid now under the CA.
func Load(caFile, certFile, keyFile string) (*Identity, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: CA: %w", ErrBadIdentity, err)
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %w", ErrBadIdentity, err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: key: %w", ErrBadIdentity, err)
	}
	id, err := FromPEM(ca, cert, key)
	if err != nil {
		return nil, fmt.Errorf("%w (CA %s, certificate %s, key %s)", err, caFile, certFile, keyFile)
	}
	return id, nil
}

// FromPEM is Load from bytes.
func FromPEM(caPEM, certPEM, keyPEM []byte) (*Identity, error) {
	cas, err := parseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: CA: %w", ErrBadIdentity, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate and key: %w", ErrBadIdentity, err)
	}
	id := &Identity{roots: x509.NewCertPool(), ca: cas[0], cert: pair}
	for _, c := range cas {
		id.roots.AddCert(c)
	}
	if err := id.verify(pair.Leaf, nil); err != nil {
		return nil, fmt.Errorf("%w: this node's %w", ErrBadIdentity, err)
	}
	return id, nil
}

// Name is the node certificate's common name.
func (id *Identity) Name() string { return id.cert.Leaf.Subject.CommonName }

// CAName is the cluster CA's common name.
func (id *Identity) CAName() string { return id.ca.Subject.CommonName }

// verify checks that leaf (with the intermediates after it) chains to the
// CA now, for both client and server use.
func (id *Identity) verify(leaf *x509.Certificate, inter []*x509.Certificate) error {
	opts := x509.VerifyOptions{Roots: id.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if len(inter) > 0 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range inter {
			opts.Intermediates.AddCert(c)
		}
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("certificate %q (issuer %q) is not valid under the cluster CA %q: %w",
			leaf.Subject.CommonName, leaf.Issuer.CommonName, id.ca.Subject.CommonName, err)
	}
	return nil
}

func (id *Identity) verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no certificate presented", ErrPeerRefused)
	}
	if err := id.verify(cs.PeerCertificates[0], cs.PeerCertificates[1:]); err != nil {
		return fmt.Errorf("%w: %w", ErrPeerRefused, err)
	}
	return nil
}

// Refused is told of each peer refused, with its address and the reason.
// It must not block.
type Refused func(peer string, err error)

func (id *Identity) base() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
	}
}

// Server is the configuration of a listener: it asks every client for its
// certificate and refuses those the cluster CA did not sign (telling
// refused, when not nil).
func (id *Identity) Server(refused Refused) *tls.Config {
	c := id.base()
	// RequestClientCert, not Require…: a client without one then reaches
	// VerifyConnection, which refuses it and says so.
	c.ClientAuth = tls.RequestClientCert
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cc := id.base()
		cc.ClientAuth = tls.RequestClientCert
		peer := hello.Conn.RemoteAddr().String()
		cc.VerifyConnection = func(cs tls.ConnectionState) error {
			err := id.verifyPeer(cs)
			if err != nil && refused != nil {
				refused(peer, err)
			}
			return err
		}
		return cc, nil
	}
	return c
}

// Client is the configuration of a dialer: it presents this node's
// certificate and refuses a server the cluster CA did not sign; the
// handshake's error (an ErrPeerRefused) says why, for the dialer to report
// with the address it dialed.
func (id *Identity) Client() *tls.Config {
	c := id.base()
	// The chain is verified below against the cluster CA; names are not
	// (see the package comment), which crypto/tls only allows this way.
	c.InsecureSkipVerify = true
	c.VerifyConnection = id.verifyPeer
	return c
}
