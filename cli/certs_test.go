package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/internal/pki"
)

func TestCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out bytes.Buffer
	if err := runCerts(&out, certsFlags{out: dir, nodes: "n1,n2", valid: time.Hour, caName: "test CA", json: true}); err != nil {
		t.Fatal(err)
	}
	var res certsResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || !res.NewCA || len(res.Nodes) != 2 {
		t.Fatalf("%s: %v", out.String(), err)
	}
	for _, n := range res.Nodes {
		id, err := pki.Load(res.CA, n.Cert, n.Key)
		if err != nil || id.Name() != n.Name || id.CAName() != "test CA" {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if st, _ := os.Stat(n.Key); st.Mode().Perm() != 0o600 {
			t.Fatalf("%s is %v, want 0600", n.Key, st.Mode())
		}
	}
	// A later node is signed by the same CA.
	out.Reset()
	if err := runCerts(&out, certsFlags{out: dir, nodes: "n3", valid: time.Hour, json: true}); err != nil {
		t.Fatal(err)
	}
	var more certsResult
	json.Unmarshal(out.Bytes(), &more)
	if more.NewCA {
		t.Fatal("a second call made a new CA")
	}
	if _, err := pki.Load(res.CA, more.Nodes[0].Cert, more.Nodes[0].Key); err != nil {
		t.Fatal(err)
	}
	// Nothing is overwritten, and nothing is written when one file exists.
	before, _ := os.ReadFile(filepath.Join(dir, "n1.pem"))
	err := runCerts(&out, certsFlags{out: dir, nodes: "n4,n1", valid: time.Hour})
	if err == nil {
		t.Fatal("overwrote n1")
	}
	after, _ := os.ReadFile(filepath.Join(dir, "n1.pem"))
	if !bytes.Equal(before, after) || exists(filepath.Join(dir, "n4.pem")) {
		t.Fatal("a refused call wrote files")
	}
	for _, bad := range []certsFlags{{out: dir, nodes: "a/b", valid: time.Hour}, {out: dir, nodes: "ca", valid: time.Hour},
		{out: dir, nodes: "x,x", valid: time.Hour}, {nodes: "x", valid: time.Hour}, {out: dir, nodes: "x"}} {
		if err := runCerts(&out, bad); !errors.Is(err, errUsage) {
			t.Errorf("%+v: %v, want a usage error", bad, err)
		}
	}
	// A CA certificate without its key is an error, not a new CA.
	os.Remove(filepath.Join(dir, "ca-key.pem"))
	if err := runCerts(&out, certsFlags{out: dir, nodes: "n5", valid: time.Hour}); err == nil || exists(filepath.Join(dir, "n5.pem")) {
		t.Fatalf("CA without its key: %v", err)
	}
}
