package elastic

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
)

func TestParseKey(t *testing.T) {
	k16 := bytes.Repeat([]byte{7}, 16)
	gen, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in      string
		wantLen int
		want    []byte
	}{
		{"hex:07070707070707070707070707070707", 16, k16},
		{"base64:" + base64.StdEncoding.EncodeToString(k16), 16, k16},
		{base64.StdEncoding.EncodeToString(k16), 16, k16},
		{gen, 32, nil},
		{"passphrase:correct horse battery", 32, nil},
		{"correct horse battery", 32, nil},
	} {
		k, err := ParseKey(tc.in)
		if err != nil || len(k) != tc.wantLen || tc.want != nil && !bytes.Equal(k, tc.want) {
			t.Errorf("%q: got %x, %v", tc.in, k, err)
		}
	}
	// A passphrase derives the same key everywhere, with or without prefix.
	a, _ := ParseKey("passphrase:correct horse battery")
	b, _ := ParseKey("correct horse battery")
	if !bytes.Equal(a, b) {
		t.Error("passphrase keys differ")
	}
	for _, bad := range []string{"", "hex:0707", "hex:zz", "base64:AAAA", "base64:%%%", "short", "passphrase:short"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("%q: got %v, want ErrBadKey", bad, err)
		}
	}
}
