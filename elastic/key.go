package elastic

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Cluster keys. memberlist encrypts and authenticates all gossip with the
// key (AES-GCM; 16, 24 or 32 bytes select AES-128, -192, -256): a node
// without it cannot join, and garbage or forged packets are dropped. The
// rendezvous messages, which travel through protoactor remote, carry an
// HMAC-SHA256 under a key derived from it.

// passphraseSalt is fixed so that every node derives the same key from the
// same passphrase; it only keeps troupe's keys apart from other uses of
// the passphrase.
const (
	passphraseSalt  = "troupe/elastic/cluster-key/v1"
	passphraseIter  = 100_000
	minPassphrase   = 12
	rendezvousLabel = "troupe/elastic/rendezvous-mac/v1"
)

// ParseKey reads a cluster key from text (the --cluster-key flag or an
// environment variable):
//
//	hex:<32, 48 or 64 hex digits>     a 16, 24 or 32 byte key
//	base64:<standard base64>          a 16, 24 or 32 byte key
//	passphrase:<at least 12 bytes>    a 32 byte key by PBKDF2-SHA256
//	                                  (100 000 iterations, fixed salt)
//	<anything else>                   standard base64 of 16, 24 or 32 bytes
//	                                  (what GenerateKey and `consul keygen`
//	                                  print) if it decodes as such,
//	                                  otherwise a passphrase
func ParseKey(s string) ([]byte, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf("%w: empty", ErrBadKey)
	case strings.HasPrefix(s, "hex:"):
		k, err := hex.DecodeString(s[len("hex:"):])
		if err != nil {
			return nil, fmt.Errorf("%w: hex: %v", ErrBadKey, err)
		}
		return k, checkKeyLen(k)
	case strings.HasPrefix(s, "base64:"):
		k, err := base64.StdEncoding.DecodeString(s[len("base64:"):])
		if err != nil {
			return nil, fmt.Errorf("%w: base64: %v", ErrBadKey, err)
		}
		return k, checkKeyLen(k)
	case strings.HasPrefix(s, "passphrase:"):
		return passphraseKey(s[len("passphrase:"):])
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && checkKeyLen(k) == nil {
		return k, nil
	}
	return passphraseKey(s)
}

func passphraseKey(p string) ([]byte, error) {
	if len(p) < minPassphrase {
		return nil, fmt.Errorf("%w: a passphrase needs at least %d bytes, got %d", ErrBadKey, minPassphrase, len(p))
	}
	return pbkdf2.Key(sha256.New, p, []byte(passphraseSalt), passphraseIter, 32)
}

func checkKeyLen(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: %d bytes, want 16, 24 or 32", ErrBadKey, len(k))
}

// GenerateKey returns a new random 32-byte key as standard base64, the
// form ParseKey reads without a prefix.
func GenerateKey() (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(k), nil
}

// macKey derives the rendezvous message key from the cluster key, so that
// the gossip key itself never signs anything else. nil without a key.
func macKey(key []byte) []byte {
	if len(key) == 0 {
		return nil
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte(rendezvousLabel))
	return h.Sum(nil)
}
