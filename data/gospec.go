package data

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"sync"
)

// goSpecGz is doc/go_spec.html of Go 1.26.8, gzipped: the default corpus
// ships inside the binary, so that the default job trains on the same text
// on every machine, with or without a Go installation (gospec/README.md
// says where it comes from and under which licence).
//
//go:embed gospec/go_spec.html.gz
var goSpecGz []byte

// goSpecSHA256 is the SHA-256 of the uncompressed embedded spec, as
// gospec/README.md records it.
const goSpecSHA256 = "e5806989624c1e9dd32bddaedd2f70a1dd208295cb6d0ff72b02625b2cd6f592"

// goSpec returns the embedded spec, decompressed on first use and shared
// afterwards: callers must not modify it.
var goSpec = sync.OnceValues(func() ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(goSpecGz))
	if err != nil {
		return nil, fmt.Errorf("%w: the embedded Go spec: %v", ErrFormat, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%w: the embedded Go spec: %v", ErrFormat, err)
	}
	return raw, nil
})
